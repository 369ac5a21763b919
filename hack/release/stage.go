package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// stage copies the work tree at root, the files git knows of (tracked, and
// untracked but not ignored), into a fresh clone's directory, so that the
// go command stamps the binaries with the commit: it recognises only a .git
// directory, not the .git file of a worktree, and would leave the revision
// out silently. HEAD and the index are root's HEAD, so vcs.modified says
// whether the work tree differs from it, as it would in place. Nothing
// ignored (bin/, dist/) can reach the build. The caller removes dir.
func stage(root string) (dir string, err error) {
	dir, err = os.MkdirTemp("", "tripswitch-release-src-")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	rev, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	if _, err := git("", "clone", "--quiet", "--shared", "--no-checkout", root, dir); err != nil {
		return "", err
	}
	if _, err := git(dir, "reset", "--quiet", strings.TrimSpace(rev)); err != nil {
		return "", err
	}
	list, err := git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return "", err
	}
	for _, name := range strings.Split(strings.TrimRight(list, "\x00"), "\x00") {
		if err := copyFile(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("stage %s: %w", name, err)
		}
	}
	return dir, nil
}

// copyFile copies a regular file or a symlink, keeping its mode; a file git
// lists but the work tree no longer has (deleted, not yet committed) is
// left out, as it is from the build in place.
func copyFile(src, dst string) error {
	fi, err := os.Lstat(src)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	if !fi.Mode().IsRegular() {
		return nil // a submodule's directory: none here
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, fi.Mode().Perm())
}

// git runs git in dir and returns its standard output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w\n%s (the release builds from a git checkout)", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out), nil
}
