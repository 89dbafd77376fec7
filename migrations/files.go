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
		migs = append(migs, migration{version: v, name: p.name, online: p.online, up: p.up, down: p.down})
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
