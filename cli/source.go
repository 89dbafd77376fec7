package cli

import (
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/source"
)

// This file holds --source: the URL that chooses a source driver
// (Config.Sources) for run, rebuild and parked repair, with each driver's
// own flags grouped under its title in the help.

// sourceOptions are the flags that say where and how to read the source.
type sourceOptions struct {
	a   *App
	URL string
	// ESDBURL is --esdb-url, the alias of --source from before there were
	// other sources.
	ESDBURL string
	openers []source.Opener // index-aligned with a.cfg.Sources

	// Set by Validate.
	url    string
	driver source.Driver
	opener source.Opener
}

// bindSource binds --source, --esdb-url and every driver's flags for
// command.
func (a *App) bindSource(fs *pflag.FlagSet, command string, o *sourceOptions) {
	o.a = a
	var schemes []string
	for _, d := range a.cfg.Sources {
		schemes = append(schemes, d.Schemes()[0]+"://…")
	}
	fs.StringVar(&o.URL, "source", "", "the source to read, by `URL`: "+orNone(strings.Join(schemes, ", "))+" (each source's flags below)")
	fs.StringVar(&o.ESDBURL, "esdb-url", "", "EventStoreDB connection `string` (esdb://host:2113?tls=false): the older name of --source, used when --source is not set")
	for _, d := range a.cfg.Sources {
		own := pflag.NewFlagSet(d.Title(), pflag.ContinueOnError)
		o.openers = append(o.openers, d.Bind(own, command))
		own.VisitAll(func(f *pflag.Flag) {
			clikit.SetFlagGroup(f, d.Title())
			if prev := fs.Lookup(f.Name); prev != nil {
				// Two drivers share a flag (the same name and meaning,
				// such as a mapping's): one flag sets both.
				prev.Value = teeValue{prev.Value, f.Value}
				clikit.SetFlagGroup(prev, clikit.FlagGroup(prev)+", "+d.Title())
				return
			}
			fs.AddFlag(f)
		})
	}
}

func orNone(s string) string {
	if s == "" {
		return "none in this binary"
	}
	return s
}

// Validate finds the driver of the URL and checks its flags.
func (o *sourceOptions) Validate() error {
	u := o.URL
	if u == "" { // --source wins: $ESDB_URL may be set for another command
		u = o.ESDBURL
	}
	if u == "" {
		return clikit.Usagef("no source: set --source (%s) or $%s", orNone(strings.Join(o.schemes(), ", ")), clikit.EnvSource)
	}
	scheme, _, ok := strings.Cut(u, "://")
	if !ok {
		scheme = u // a scheme alone: "postgres"
	} else if p, err := url.Parse(u); err == nil {
		scheme = p.Scheme
	}
	scheme = strings.ToLower(scheme)
	for i, d := range o.a.cfg.Sources {
		if slices.Contains(d.Schemes(), scheme) {
			o.url, o.driver, o.opener = u, d, o.openers[i]
			if err := o.opener.Validate(u); err != nil {
				return clikit.Usagef("%s source: %v", d.Title(), err)
			}
			return nil
		}
	}
	if len(o.a.cfg.Sources) == 0 {
		return clikit.Usagef("this binary has no source drivers (cli.Config.Sources)")
	}
	return clikit.Usagef("no source for %s:// URLs; this binary reads %s", scheme, strings.Join(o.schemes(), ", "))
}

func (o *sourceOptions) schemes() []string {
	var s []string
	for _, d := range o.a.cfg.Sources {
		for _, sc := range d.Schemes() {
			s = append(s, sc+"://")
		}
	}
	return s
}

// title names the chosen source.
func (o *sourceOptions) title() string { return o.driver.Title() }

// teeValue sets two flags' values at once.
type teeValue struct{ a, b pflag.Value }

func (t teeValue) String() string { return t.a.String() }
func (t teeValue) Type() string   { return t.a.Type() }
func (t teeValue) Set(s string) error {
	if err := t.a.Set(s); err != nil {
		return err
	}
	return t.b.Set(s)
}
