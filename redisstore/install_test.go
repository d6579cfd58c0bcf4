package redisstore_test

import (
	"archive/zip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The modules of this repository that users install, by path inside it.
var installable = map[string]string{
	"github.com/crawlerkit/throttle":            ".",
	"github.com/crawlerkit/throttle/redisstore": "redisstore",
}

// requireLine matches a requirement of one of this repository's modules
// in a go.mod.
var requireLine = regexp.MustCompile(`(?m)^\s*(?:require\s+)?(github\.com/crawlerkit/throttle(?:/[a-z/]+)?)\s+(v\S+)`)

// TestNestedModulesRequireARelease: every nested module requires this
// repository's modules at one real version, the one they are tagged with
// together (RELEASING.md), never a pseudo-version of no commit such as
// v0.0.0-00010101000000-000000000000: with that, `go get
// github.com/crawlerkit/throttle/redisstore@v0.1.0` failed, since the
// replace directive that made it build here is ignored in a dependency.
func TestNestedModulesRequireARelease(t *testing.T) {
	v := releaseVersion(t)
	require.Regexp(t, `^v\d+\.\d+\.\d+$`, v)
}

// releaseVersion returns the version the nested modules require this
// repository's modules at, checking that they agree.
func releaseVersion(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	var version string
	mods, err := filepath.Glob(filepath.Join(root, "*", "go.mod"))
	require.NoError(t, err)
	more, err := filepath.Glob(filepath.Join(root, "*", "*", "go.mod"))
	require.NoError(t, err)
	for _, gomod := range append(mods, more...) {
		data, err := os.ReadFile(gomod)
		require.NoError(t, err)
		for _, m := range requireLine.FindAllStringSubmatch(string(data), -1) {
			rel, _ := filepath.Rel(root, gomod)
			require.NotContains(t, m[2], "-", "%s requires %s at %s: a pseudo-version, not a release", rel, m[1], m[2])
			if version == "" {
				version = m[2]
			}
			require.Equal(t, version, m[2], "%s requires %s at %s, others at %s", rel, m[1], m[2], version)
		}
	}
	require.NotEmpty(t, version, "no nested module requires this repository's modules")
	return version
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.work"))
	require.NoError(t, err, "the repository root")
	return root
}

// TestInstallsAlone is what a user does once the modules are tagged: in a
// new module, `go get github.com/crawlerkit/throttle/redisstore@<version>`
// and build a program on it, with no go.work and no replace. The tagged
// modules come from a file GOPROXY made from the working tree at the
// version the nested modules require; their dependencies from this
// machine's module cache (its cache/download is a GOPROXY too), and what it
// lacks from the environment's GOPROXY (a new machine's cache lacks some).
func TestInstallsAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a new module (~10 s); not under -short")
	}
	version := releaseVersion(t)
	root := repoRoot(t)
	goBin, err := exec.LookPath("go") // the go command running this test
	require.NoError(t, err)
	cache, err := exec.Command(goBin, "env", "GOMODCACHE").Output()
	require.NoError(t, err)
	upstream, err := exec.Command(goBin, "env", "GOPROXY").Output()
	require.NoError(t, err)

	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	for mod, dir := range installable {
		writeModule(t, proxy, mod, version, filepath.Join(root, dir))
	}
	user := filepath.Join(tmp, "user")
	require.NoError(t, os.MkdirAll(user, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(user, "main.go"), []byte(`package main

import (
	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
)

func main() {
	store, err := redisstore.New(redisstore.NewClient(&redis.Options{Addr: "localhost:6379"}), redisstore.Options{})
	if err != nil {
		panic(err)
	}
	cfg := throttle.DefaultConfig()
	cfg.Store = store
	if _, err := throttle.New(cfg); err != nil {
		panic(err)
	}
}
`), 0o644))
	env := append(os.Environ(),
		// This repository's modules from the file proxy; the others from
		// the module cache (its cache/download is a proxy too), else from
		// the environment's GOPROXY: a new machine's cache lacks the
		// .info files of modules that only appear in go.mod files (x/crypto
		// for x/net), which go get reads.
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(strings.TrimSpace(string(cache)), "cache", "download"))+","+strings.TrimSpace(string(upstream)),
		"GOMODCACHE="+filepath.Join(tmp, "modcache"), // the fake release stays out of the real cache
		"GOFLAGS=-mod=mod -modcacherw", "GOWORK=off", "GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GOTOOLCHAIN=local")
	run := func(args ...string) string {
		cmd := exec.Command(goBin, args...)
		cmd.Dir, cmd.Env = user, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	run("mod", "init", "example.com/user")
	run("get", "github.com/crawlerkit/throttle/redisstore@"+version)
	run("build", "./...")
	list := run("list", "-m", "all")
	require.Contains(t, list, "github.com/crawlerkit/throttle "+version+"\n")
	require.Contains(t, list, "github.com/crawlerkit/throttle/redisstore "+version+"\n")
	t.Logf("go get github.com/crawlerkit/throttle/redisstore@%s and go build in a new module: ok", version)
}

// writeModule writes module mod at version, made from the files of dir, in
// the layout of a GOPROXY: list, .info, .mod and .zip under
// <proxy>/<mod>/@v/. Like a module zip from its tag, it leaves out nested
// modules (directories with a go.mod of their own) and .git.
func writeModule(t *testing.T, proxy, mod, version, dir string) {
	t.Helper()
	at := filepath.Join(proxy, filepath.FromSlash(mod), "@v")
	require.NoError(t, os.MkdirAll(at, 0o755))
	info, err := json.Marshal(map[string]any{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	require.NoError(t, err)
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(at, "list"), []byte(version+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(at, version+".info"), info, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(at, version+".mod"), gomod, 0o644))

	f, err := os.Create(filepath.Join(at, version+".zip"))
	require.NoError(t, err)
	defer f.Close()
	zw := zip.NewWriter(f)
	prefix := mod + "@" + version + "/"
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		w, err := zw.Create(prefix + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
	require.NoError(t, err)
	require.NoError(t, zw.Close())
}
