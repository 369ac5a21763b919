package cluster_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// byHandSection is the section of docs/cluster.md a user follows by hand.
const byHandSection = "## Trying tripswitch by hand"

// testByHand runs docs/cluster.md's by-hand path exactly as written: every
// ```sh block of its section, in order, in one bash (set -euo pipefail), from
// the repository's root, with the pinned tools the blocks name. The blocks
// install tripswitch with bin/helm, deploy the sample webhook (make
// cluster-sample), hang it until the breaker says Open, heal it until it
// says Closed, repair what was admitted without it with the Job that
// `tripswitch remediate --job` prints, and take it all away. Run after
// HelmLifecycle, which uninstalled the tests' release.
func testByHand(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(env.root, "docs", "cluster.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := shellBlocks(section(string(doc), byHandSection))
	if len(blocks) < 4 {
		t.Fatalf("docs/cluster.md %q has %d sh blocks, want the install, the sample, the outage and the repair", byHandSection, len(blocks))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\n"+strings.Join(blocks, "\n"))
	cmd.Dir = env.root
	began := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("docs/cluster.md, %q, as written (%v):\n%s", byHandSection, time.Since(began).Round(time.Second), out)
	if err != nil {
		t.Fatalf("the by-hand path failed: %v", err)
	}
	// The two label checks print the webhook's label: once on a create
	// through it, once on the object the remediation Job repaired.
	if n := strings.Count("\n"+string(out), "\ntrue\n"); n != 2 {
		t.Errorf("the by-hand path printed the label injected=true %d times, want 2 (before the outage, and after the repair)", n)
	}
}

// section is the text from the heading to the next heading of its level.
func section(doc, heading string) string {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := doc[i+len(heading)+2:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// shellBlocks are the bodies of the ```sh blocks of text, in order.
func shellBlocks(text string) []string {
	var blocks []string
	for {
		i := strings.Index(text, "```sh\n")
		if i < 0 {
			return blocks
		}
		text = text[i+len("```sh\n"):]
		j := strings.Index(text, "```")
		if j < 0 {
			return blocks
		}
		blocks = append(blocks, text[:j])
		text = text[j+3:]
	}
}
