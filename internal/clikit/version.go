package clikit

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Build describes the running binary.
type Build struct {
	// Version is the main module's version ("v1.2.3", "(devel)" for a
	// build from a work tree), or the one stamped at build time.
	Version string `json:"version"`
	// Revision is the VCS revision the binary was built from ("" if
	// unknown), Time its commit time, Modified whether the work tree had
	// changes.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// GoVersion is the Go toolchain that built it.
	GoVersion string `json:"go_version"`
}

// ReadBuild returns the binary's build information; stamped, if not empty,
// is a version set at build time (-ldflags "-X main.version=…"), which
// wins over the module version. A stamp of the form "<version>+<revision>"
// also gives the revision when the build info has none (a container build
// without .git).
func ReadBuild(stamped string) Build {
	b := Build{Version: "(devel)", GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if stamped != "" {
		v, rev, ok := strings.Cut(stamped, "+")
		b.Version = v
		if ok && b.Revision == "" {
			b.Revision = rev
		}
	}
	return b
}

// String renders the build on one line: "v1.2.3 (revision 0123abcd,
// modified, go1.26.8)".
func (b Build) String() string {
	var parts []string
	if b.Revision != "" {
		r := b.Revision
		if len(r) > 12 {
			r = r[:12]
		}
		parts = append(parts, "revision "+r)
	}
	if b.Time != "" {
		parts = append(parts, b.Time)
	}
	if b.Modified {
		parts = append(parts, "modified")
	}
	parts = append(parts, b.GoVersion)
	return b.Version + " (" + strings.Join(parts, ", ") + ")"
}
