package clikit

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Environment variables of the flags, the one table of them: a flag of that
// name in any command — a binary's own commands included — takes its value
// from the variable when it is not on the command line. A command may
// name another variable for one of its flags, or none, with SetEnv.
const (
	EnvDatabaseURL    = "DATABASE_URL"
	EnvESDBURL        = "ESDB_URL"
	EnvSource         = "INORDER_SOURCE"
	EnvSchema         = "INORDER_SCHEMA"
	EnvHTTPAddr       = "INORDER_HTTP_ADDR"
	EnvHTTPToken      = "INORDER_HTTP_TOKEN"
	EnvHTTPAdminToken = "INORDER_HTTP_ADMIN_TOKEN"
	EnvConsole        = "INORDER_CONSOLE"
	EnvConsolePayload = "INORDER_CONSOLE_PAYLOADS"
	EnvHTTPMaxWait    = "INORDER_HTTP_MAX_WAIT"
	EnvLogFormat      = "INORDER_LOG_FORMAT"
	EnvLogLevel       = "INORDER_LOG_LEVEL"
	EnvMode           = "INORDER_MODE"
	EnvSourceName     = "INORDER_SOURCE_NAME"
	EnvGroup          = "INORDER_GROUP"
	EnvStream         = "INORDER_STREAM"
	EnvStreamPrefix   = "INORDER_STREAM_PREFIX"
	EnvTypeRegex      = "INORDER_TYPE_REGEX"
	EnvVersionField   = "INORDER_VERSION_FIELD"
	EnvWorkers        = "INORDER_WORKERS"
	EnvBatchSize      = "INORDER_BATCH_SIZE"
	EnvMaxWait        = "INORDER_MAX_WAIT"
	EnvBufferSize     = "INORDER_BUFFER_SIZE"
	EnvReadAhead      = "INORDER_READ_AHEAD"
	EnvStrategy       = "INORDER_CONSUMER_STRATEGY"
	EnvTrustServerCP  = "INORDER_TRUST_SERVER_CHECKPOINTS"
	EnvFromEnd        = "INORDER_FROM_END"
	EnvRepairAfter    = "INORDER_REPAIR_AFTER"
	EnvDrainTimeout   = "INORDER_DRAIN_TIMEOUT"
	EnvMigrate        = "INORDER_MIGRATE"
	EnvBuild          = "INORDER_BUILD"
	EnvReadyMaxLag    = "INORDER_READY_MAX_LAG"
	EnvRiverSchema    = "INORDER_RIVER_SCHEMA"
	EnvEffectsWorkers = "INORDER_EFFECTS_WORKERS"
	EnvOperator       = "INORDER_OPERATOR"

	EnvEffectsCallTimeout       = "INORDER_EFFECTS_CALL_TIMEOUT"
	EnvEffectsLease             = "INORDER_EFFECTS_LEASE"
	EnvEffectsReconcileInterval = "INORDER_EFFECTS_RECONCILE_INTERVAL"
	EnvEffectsRescueAfter       = "INORDER_EFFECTS_RESCUE_AFTER"
)

// EnvVars maps flag names to their environment variables.
func EnvVars() map[string]string {
	return map[string]string{
		"database-url":               EnvDatabaseURL,
		"esdb-url":                   EnvESDBURL,
		"source":                     EnvSource,
		"schema":                     EnvSchema,
		"http-addr":                  EnvHTTPAddr,
		"http-token":                 EnvHTTPToken,
		"http-admin-token":           EnvHTTPAdminToken,
		"console":                    EnvConsole,
		"console-payloads":           EnvConsolePayload,
		"http-max-wait":              EnvHTTPMaxWait,
		"log-format":                 EnvLogFormat,
		"log-level":                  EnvLogLevel,
		"mode":                       EnvMode,
		"name":                       EnvSourceName,
		"group":                      EnvGroup,
		"stream":                     EnvStream,
		"stream-prefix":              EnvStreamPrefix,
		"type-regex":                 EnvTypeRegex,
		"version-field":              EnvVersionField,
		"workers":                    EnvWorkers,
		"batch-size":                 EnvBatchSize,
		"max-wait":                   EnvMaxWait,
		"buffer-size":                EnvBufferSize,
		"read-ahead":                 EnvReadAhead,
		"consumer-strategy":          EnvStrategy,
		"trust-server-checkpoints":   EnvTrustServerCP,
		"from-end":                   EnvFromEnd,
		"repair-after":               EnvRepairAfter,
		"drain-timeout":              EnvDrainTimeout,
		"build":                      EnvBuild,
		"migrate":                    EnvMigrate,
		"ready-max-lag":              EnvReadyMaxLag,
		"river-schema":               EnvRiverSchema,
		"effects-workers":            EnvEffectsWorkers,
		"effects-call-timeout":       EnvEffectsCallTimeout,
		"effects-lease":              EnvEffectsLease,
		"effects-reconcile-interval": EnvEffectsReconcileInterval,
		"effects-rescue-after":       EnvEffectsRescueAfter,
	}
}

// envAnnotation is the flag annotation that names a flag's variable (the
// value of source.FlagEnvAnnotation, by which source drivers name theirs).
const envAnnotation = "inorder_env"

// SetEnv makes flag name of fs take its value from the variable env instead
// of the table's; an empty env gives it none.
func SetEnv(fs *pflag.FlagSet, name, env string) {
	_ = fs.SetAnnotation(name, envAnnotation, []string{env})
}

// FlagEnv returns the variable of f ("" for none), once AnnotateEnv ran.
func FlagEnv(f *pflag.Flag) string {
	if v := f.Annotations[envAnnotation]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// AnnotateEnv gives every flag of the tree under root its variable — its
// own (SetEnv) or the table's — and names it in the flag's help.
func AnnotateEnv(root *cobra.Command) {
	vars := EnvVars()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			env, own := f.Annotations[envAnnotation]
			name := vars[f.Name]
			if own {
				name = env[0]
			}
			if !own && name != "" {
				if f.Annotations == nil {
					f.Annotations = map[string][]string{}
				}
				f.Annotations[envAnnotation] = []string{name}
			}
			if name != "" {
				f.Usage += " [$" + name + "]"
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

// ApplyEnv sets every flag of c whose variable getenv finds, before the
// command line is parsed (so a flag on it wins), and marks it Changed: the
// variable stands in for the flag, as given. An invalid value is a usage
// error.
func ApplyEnv(c *cobra.Command, getenv func(string) string) error {
	var err error
	c.Flags().VisitAll(func(f *pflag.Flag) {
		env := FlagEnv(f)
		if env == "" || err != nil {
			return
		}
		if v := getenv(env); v != "" {
			if serr := f.Value.Set(v); serr != nil {
				err = Usagef("invalid $%s=%q: %v", env, v, serr)
			}
			f.Changed = true
		}
	})
	return err
}

// groupAnnotation is the flag annotation that names a flag's group in the
// help (GroupedUsage).
const groupAnnotation = "inorder_group"

// SetFlagGroup puts f in the help's group title (a source's flags).
func SetFlagGroup(f *pflag.Flag, title string) {
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[groupAnnotation] = []string{title}
}

// FlagGroup returns f's group ("" for the command's own flags).
func FlagGroup(f *pflag.Flag) string {
	if v := f.Annotations[groupAnnotation]; len(v) == 1 {
		return v[0]
	}
	return ""
}
