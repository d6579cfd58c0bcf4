package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildOutputsIgnored: `go build` in any command's directory of the
// repository (every package main) leaves a binary named after the
// directory, and git ignores it, so trying the examples leaves `git
// status` clean (a newcomer found an untracked examples/fleet/fleet).
func TestBuildOutputsIgnored(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not found")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout")
	}
	var dirs []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(src), "\npackage main\n") || strings.HasPrefix(string(src), "package main\n") {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		if seen[d] {
			continue
		}
		seen[d] = true
		bin, _ := filepath.Rel(root, filepath.Join(d, filepath.Base(d)))
		cmd := exec.Command(git, "check-ignore", "-q", "--no-index", bin)
		cmd.Dir = root
		if err := cmd.Run(); err != nil {
			t.Errorf("%s (what go build leaves in %s) is not ignored by .gitignore", bin, filepath.Dir(bin))
		}
	}
	if len(seen) < 10 {
		t.Errorf("found %d command directories, want the examples, cmd/throttlesim and this one", len(seen))
	}
}
