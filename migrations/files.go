package migrations

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var fileRE = regexp.MustCompile(`^([0-9]+)_([A-Za-z0-9_]+)\.(up|down)\.sql$`)

// directiveRE matches the first line of an up migration: whether it is
// online, then optionally why.
var directiveRE = regexp.MustCompile(`^-- inorder:(online|offline)(?:$|[ \t])`)

// load reads and validates every file at the root of fsys.
func load(fsys fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: read files: %w", err)
	}
	type pair struct {
		name             string
		upFile, downFile string
		up, down         string
		hasUp, hasDown   bool
		online           bool
		noTx             bool
	}
	byVersion := map[int]*pair{}
	var errs []error
	for _, e := range entries {
		file := e.Name()
		if e.IsDir() {
			errs = append(errs, fmt.Errorf("unexpected directory %s", file))
			continue
		}
		m := fileRE.FindStringSubmatch(file)
		if m == nil {
			errs = append(errs, fmt.Errorf("%s: name is not NNN_name.up.sql or NNN_name.down.sql", file))
			continue
		}
		version, err := strconv.Atoi(m[1])
		if err != nil || version < 1 {
			errs = append(errs, fmt.Errorf("%s: version must be a positive number", file))
			continue
		}
		body, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", file, err)
		}
		p := byVersion[version]
		if p == nil {
			p = &pair{name: m[2]}
			byVersion[version] = p
		}
		if p.name != m[2] {
			errs = append(errs, fmt.Errorf("%s: version %d is already named %q", file, version, p.name))
			continue
		}
		switch m[3] {
		case "up":
			if p.hasUp {
				errs = append(errs, fmt.Errorf("%s: duplicate up migration for version %d (also %s)", file, version, p.upFile))
				continue
			}
			if strings.TrimSpace(string(body)) == "" {
				errs = append(errs, fmt.Errorf("%s: empty up migration", file))
			} else {
				first, _, _ := strings.Cut(string(body), "\n")
				d := directiveRE.FindStringSubmatch(strings.TrimSuffix(first, "\r"))
				if d == nil {
					errs = append(errs, fmt.Errorf("%s: first line must be \"-- inorder:online\" or \"-- inorder:offline\" (may its old and new workers run while it does?), not %q", file, first))
				}
				p.online = d != nil && d[1] == "online"
				p.noTx = hasNoTxDirective(string(body))
			}
			p.hasUp, p.upFile, p.up = true, file, string(body)
		case "down":
			if p.hasDown {
				errs = append(errs, fmt.Errorf("%s: duplicate down migration for version %d (also %s)", file, version, p.downFile))
				continue
			}
			p.hasDown, p.downFile, p.down = true, file, string(body)
		}
	}
	versions := make([]int, 0, len(byVersion))
	for v := range byVersion {
		versions = append(versions, v)
	}
	sort.Ints(versions)
	migs := make([]migration, 0, len(versions))
	for i, v := range versions {
		p := byVersion[v]
		if !p.hasUp {
			errs = append(errs, fmt.Errorf("%s: no up migration for version %d", p.downFile, v))
		}
		if !p.hasDown {
			errs = append(errs, fmt.Errorf("%s: no down migration for version %d", p.upFile, v))
		}
		switch {
		case i == 0 && v != 1:
			errs = append(errs, fmt.Errorf("gap: versions start at %d, not 1", v))
		case i > 0 && v != versions[i-1]+1:
			errs = append(errs, fmt.Errorf("gap: version %d follows %d", v, versions[i-1]))
		}
		mig := migration{version: v, name: p.name, online: p.online, noTx: p.noTx, up: p.up, down: p.down}
		if p.hasUp && p.hasDown {
			if err := checkTransaction(&mig, p.upFile, p.downFile); err != nil {
				errs = append(errs, err)
			}
		}
		migs = append(migs, mig)
	}
	if len(entries) == 0 {
		errs = append(errs, errors.New("no migration files"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return migs, nil
}

// lockKey derives the advisory lock key for a schema.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("inorder/migrations\x00" + schema))
	return int64(h.Sum64())
}

// noTxDirective, on the line after the online/offline directive, makes a
// migration run outside a transaction.
const noTxDirective = "-- inorder:no-transaction"

// hasNoTxDirective reports whether the second line of an up migration is
// noTxDirective.
func hasNoTxDirective(body string) bool {
	lines := strings.SplitN(body, "\n", 3)
	return len(lines) >= 2 && strings.TrimSpace(strings.TrimSuffix(lines[1], "\r")) == noTxDirective
}

var (
	// concurrentlyRE finds the keyword that cannot run in a transaction.
	concurrentlyRE = regexp.MustCompile(`(?i)\bCONCURRENTLY\b`)
	// createIndexRE matches CREATE INDEX CONCURRENTLY, capturing IF NOT
	// EXISTS and the index's name.
	createIndexRE = regexp.MustCompile(`(?is)^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(IF\s+NOT\s+EXISTS\s+)?("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)?\s*ON\s`)
	// dropIndexRE matches DROP INDEX CONCURRENTLY, capturing IF EXISTS.
	dropIndexRE = regexp.MustCompile(`(?is)^DROP\s+INDEX\s+CONCURRENTLY\s+(IF\s+EXISTS\s+)?`)
)

// code returns sql without its line comments ("--" to the end of the
// line), trimmed. A "--" inside a string literal ('…', a doubled quote
// standing for one; E'…' with backslash escapes too), a quoted identifier
// ("…", likewise) or a dollar-quoted body ($$…$$, $tag$…$tag$) is code and
// kept, as are block comments (/* … */, nested as PostgreSQL nests them),
// so that a quote inside one of them opens nothing.
func code(sql string) string {
	var b strings.Builder
	b.Grow(len(sql))
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			end := strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				i = len(sql)
				continue
			}
			i += end // keep the newline
			continue
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			n := blockComment(sql[i:])
			b.WriteString(sql[i : i+n])
			i += n
			continue
		case c == '\'':
			n := quoted(sql[i:], '\'', escapes(sql, i))
			b.WriteString(sql[i : i+n])
			i += n
			continue
		case c == '"':
			n := quoted(sql[i:], '"', false)
			b.WriteString(sql[i : i+n])
			i += n
			continue
		case c == '$' && (i == 0 || !identByte(sql[i-1])):
			if tag := dollarTagRE.FindString(sql[i:]); tag != "" {
				n := len(tag)
				if end := strings.Index(sql[i+n:], tag); end >= 0 {
					n += end + len(tag)
				} else {
					n = len(sql) - i
				}
				b.WriteString(sql[i : i+n])
				i += n
				continue
			}
		}
		b.WriteByte(c)
		i++
	}
	return strings.TrimSpace(b.String())
}

// dollarTagRE matches the tag that opens a dollar-quoted body: $$ or
// $name$ ($1, a parameter, is not one).
var dollarTagRE = regexp.MustCompile(`^\$(?:[A-Za-z_\x80-\xff][A-Za-z0-9_\x80-\xff]*)?\$`)

// identByte reports whether c may be part of an unquoted identifier or
// keyword (PostgreSQL allows $ after the first character).
func identByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// escapes reports whether the literal opening at sql[i] is an escape string
// (E'…'), in which a backslash escapes the next character.
func escapes(sql string, i int) bool {
	return i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i == 1 || !identByte(sql[i-2]))
}

// quoted returns the length of the literal or quoted identifier s starts
// with, quote included at both ends; a doubled quote inside it stands for
// one, and with backslash set a backslash escapes the next character. An
// unterminated one runs to the end of s.
func quoted(s string, quote byte, backslash bool) int {
	for i := 1; i < len(s); i++ {
		switch {
		case backslash && s[i] == '\\':
			i++
		case s[i] == quote:
			if i+1 < len(s) && s[i+1] == quote {
				i++
				continue
			}
			return i + 1
		}
	}
	return len(s)
}

// blockComment returns the length of the block comment s starts with,
// nested comments included; an unterminated one runs to the end of s.
func blockComment(s string) int {
	depth := 0
	for i := 0; i+1 < len(s); i++ {
		switch {
		case s[i] == '/' && s[i+1] == '*':
			depth++
			i++
		case s[i] == '*' && s[i+1] == '/':
			depth--
			i++
			if depth == 0 {
				return i + 1
			}
		}
	}
	return len(s)
}

// statement returns the one statement of a no-transaction migration, without
// its comments and final semicolon, or an error when there is not exactly one.
func statement(file, sql string) (string, error) {
	stmt := strings.TrimSpace(strings.TrimSuffix(code(sql), ";"))
	switch {
	case stmt == "":
		return "", fmt.Errorf("%s: a %s migration holds one statement, this one none", file, noTxDirective)
	case strings.Contains(stmt, ";"):
		return "", fmt.Errorf("%s: a %s migration holds one statement (PostgreSQL runs several sent together in one transaction); split it into migrations of one statement each", file, noTxDirective)
	case !concurrentlyRE.MatchString(stmt):
		return "", fmt.Errorf("%s: %s is for statements that cannot run in a transaction (CREATE INDEX CONCURRENTLY, DROP INDEX CONCURRENTLY, REINDEX … CONCURRENTLY); this one can: drop the directive", file, noTxDirective)
	}
	return stmt, nil
}

// checkTransaction validates how mig runs: a migration in a transaction
// must not use CONCURRENTLY, and a no-transaction one must be online, one
// statement in each direction, and safe to run again after a failure or a
// crash between the statement and its record (IF NOT EXISTS, IF EXISTS).
// It sets mig.index to the name of the index a CREATE INDEX CONCURRENTLY
// builds, for dropping an invalid one left by a failed build.
func checkTransaction(mig *migration, upFile, downFile string) error {
	if !mig.noTx {
		for _, f := range []struct{ file, sql string }{{upFile, mig.up}, {downFile, mig.down}} {
			if concurrentlyRE.MatchString(code(f.sql)) {
				return fmt.Errorf("%s: CONCURRENTLY cannot run in a transaction: the up migration's second line must be %q, and it holds that one statement", f.file, noTxDirective)
			}
		}
		return nil
	}
	if !mig.online {
		return fmt.Errorf("%s: a %s migration builds or drops an index without blocking writers: it is online", upFile, noTxDirective)
	}
	var errs []error
	up, err := statement(upFile, mig.up)
	errs = append(errs, err)
	down, err := statement(downFile, mig.down)
	errs = append(errs, err)
	if m := createIndexRE.FindStringSubmatch(up); m != nil {
		if m[1] == "" || m[2] == "" {
			errs = append(errs, fmt.Errorf("%s: CREATE INDEX CONCURRENTLY must say IF NOT EXISTS and name the index, so that it can run again after a failed or interrupted build", upFile))
		}
		mig.index = identName(m[2])
	}
	for _, f := range []struct{ file, stmt string }{{upFile, up}, {downFile, down}} {
		if m := dropIndexRE.FindStringSubmatch(f.stmt); m != nil && m[1] == "" {
			errs = append(errs, fmt.Errorf("%s: DROP INDEX CONCURRENTLY must say IF EXISTS, so that it can run again after an interruption", f.file))
		}
	}
	return errors.Join(errs...)
}

// identName returns the name an identifier as written in SQL stands for:
// unquoted, folded to lower case; quoted, as written.
func identName(ident string) string {
	if unquoted, ok := strings.CutPrefix(ident, `"`); ok {
		return strings.ReplaceAll(strings.TrimSuffix(unquoted, `"`), `""`, `"`)
	}
	return strings.ToLower(ident)
}
