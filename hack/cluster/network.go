package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// The sysctls the cluster needs: forwarding, for a Pod's packet to a Service
// whose endpoint is a Pod on the same bridge (kube-proxy rewrites it on the
// way through the host), and bridged packets through iptables, so kube-proxy's
// rules see them. Their values before are kept and put back by Down.
var sysctls = map[string]string{
	"/proc/sys/net/ipv4/ip_forward":                "1",
	"/proc/sys/net/bridge/bridge-nf-call-iptables": "1",
}

// kubeletSysctls are the kernel settings the kubelet sets when it starts
// (protectKernelDefaults: false; true would make it refuse to start on this
// host's values): vm.overcommit_memory=1, kernel.panic=10,
// kernel.panic_on_oops=1 and the root key quotas. They are kept with sysctls
// and put back by Down.
var kubeletSysctls = []string{
	"/proc/sys/vm/overcommit_memory",
	"/proc/sys/vm/panic_on_oom",
	"/proc/sys/kernel/panic",
	"/proc/sys/kernel/panic_on_oops",
	"/proc/sys/kernel/keys/root_maxkeys",
	"/proc/sys/kernel/keys/root_maxbytes",
}

// upNetwork makes the bridge (with NodeIP), the Service device and route, and
// the TS-CLUSTER chains, and sets the sysctls.
func upNetwork(l Layout) error {
	steps := [][]string{
		{"link", "add", Bridge, "type", "bridge"},
		{"addr", "add", NodeIP.String() + "/" + fmt.Sprint(PodCIDR.Bits()), "dev", Bridge},
		{"link", "set", Bridge, "up"},
		{"link", "add", ServiceDevice, "type", "bridge"},
		{"link", "set", ServiceDevice, "up"},
		{"route", "add", ServiceCIDR.String(), "dev", ServiceDevice},
	}
	for _, s := range steps {
		if err := run("ip", s...); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	if err := saveSysctls(l); err != nil {
		return err
	}
	for path, v := range sysctls {
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			return fmt.Errorf("network: set %s: %w", path, err)
		}
	}
	return fence()
}

// fence adds the chain TS-CLUSTER to the filter table and jumps to it from
// OUTPUT and FORWARD for packets to or from a cluster address only; the
// host's other traffic never enters it. A packet to or from the cluster may
// leave only through the bridge, the Service device or loopback, and a
// forwarded one may arrive only from the bridge: nothing of the cluster's
// reaches eth0, in or out.
func fence() error {
	rules := [][]string{
		{"-N", Chain},
		{"-A", Chain, "-o", "lo", "-j", "RETURN"},
		{"-A", Chain, "-o", Bridge, "-j", "RETURN"},
		{"-A", Chain, "-o", ServiceDevice, "-j", "RETURN"},
		{"-A", Chain, "-m", "comment", "--comment", "tripswitch cluster: nothing of the cluster leaves the machine", "-j", "DROP"},
		{"-N", Chain + "-IN"},
		{"-A", Chain + "-IN", "-i", Bridge, "-j", "RETURN"},
		{"-A", Chain + "-IN", "-m", "comment", "--comment", "tripswitch cluster: only the bridge forwards into the cluster", "-j", "DROP"},
	}
	for _, j := range jumps() {
		rules = append(rules, append([]string{"-I"}, j...))
	}
	for _, r := range rules {
		if err := run("iptables", append([]string{"-w", "-t", "filter"}, r...)...); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	return nil
}

// jumps are the rules in the host's chains that lead to the cluster's, each
// matching cluster addresses only.
func jumps() [][]string {
	var js [][]string
	for _, cidr := range []string{PodCIDR.String(), ServiceCIDR.String()} {
		js = append(js,
			[]string{"OUTPUT", "-d", cidr, "-j", Chain},
			[]string{"OUTPUT", "-s", cidr, "-j", Chain},
			[]string{"FORWARD", "-d", cidr, "-j", Chain},
			[]string{"FORWARD", "-s", cidr, "-j", Chain},
			[]string{"FORWARD", "-d", cidr, "-j", Chain + "-IN"},
		)
	}
	return js
}

// downNetwork removes what upNetwork and the cluster's components added: the
// jumps and chains of the cluster, kube-proxy's and the kubelet's chains (by
// kube-proxy --cleanup, then any KUBE- chain it left), the links, and puts
// the sysctls back. Each step runs even if an earlier one failed.
func downNetwork(l Layout) error {
	var errs []error
	for _, j := range jumps() {
		for run("iptables", append([]string{"-w", "-t", "filter", "-C"}, j...)...) == nil {
			if err := run("iptables", append([]string{"-w", "-t", "filter", "-D"}, j...)...); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	for _, c := range []string{Chain, Chain + "-IN"} {
		if chainExists("filter", c) {
			errs = append(errs, run("iptables", "-w", "-t", "filter", "-F", c), run("iptables", "-w", "-t", "filter", "-X", c))
		}
	}
	if _, err := os.Stat(l.Bin("kube-proxy")); err == nil {
		errs = append(errs, run(l.Bin("kube-proxy"), "--cleanup", "--proxy-mode=iptables"))
	}
	errs = append(errs, removeKubeChains())
	for _, dev := range []string{Bridge, ServiceDevice} {
		if linkExists(dev) {
			errs = append(errs, run("ip", "link", "del", dev))
		}
	}
	errs = append(errs, restoreSysctls(l))
	return errors.Join(errs...)
}

// kubeTables are the tables the kubelet and kube-proxy add KUBE- chains to.
var kubeTables = []string{"filter", "nat", "mangle"}

// removeKubeChains deletes every rule that jumps to a KUBE- chain, then the
// chains: the kubelet's canaries and whatever kube-proxy --cleanup left. Only
// the cluster's components make KUBE- chains on this host.
func removeKubeChains() error {
	var errs []error
	for _, table := range kubeTables {
		rules, err := output("iptables", "-w", "-t", table, "-S")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var chains []string
		for _, line := range strings.Split(rules, "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-"):
				chains = append(chains, f[1])
			case len(f) > 2 && f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && jumpsToKube(f):
				errs = append(errs, run("iptables", append([]string{"-w", "-t", table, "-D"}, f[1:]...)...))
			}
		}
		for _, c := range chains {
			errs = append(errs, run("iptables", "-w", "-t", table, "-F", c))
		}
		for _, c := range chains {
			errs = append(errs, run("iptables", "-w", "-t", table, "-X", c))
		}
	}
	return errors.Join(errs...)
}

func jumpsToKube(f []string) bool {
	for i := 0; i+1 < len(f); i++ {
		if (f[i] == "-j" || f[i] == "-g") && strings.HasPrefix(f[i+1], "KUBE-") {
			return true
		}
	}
	return false
}

func chainExists(table, chain string) bool {
	return exec.Command("iptables", "-w", "-t", table, "-S", chain).Run() == nil
}

func linkExists(name string) bool {
	return exec.Command("ip", "link", "show", name).Run() == nil
}

func saveSysctls(l Layout) error {
	var b bytes.Buffer
	for _, path := range append(slices.Collect(maps.Keys(sysctls)), kubeletSysctls...) {
		v, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("network: %s: %w (is the br_netfilter module loaded?)", path, err)
		}
		fmt.Fprintf(&b, "%s %s\n", path, strings.TrimSpace(string(v)))
	}
	return os.WriteFile(l.sysctlFile(), b.Bytes(), 0o644)
}

func restoreSysctls(l Layout) error {
	b, err := os.ReadFile(l.sysctlFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		path, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			return fmt.Errorf("network: restore %s: %w", path, err)
		}
	}
	return os.Remove(l.sysctlFile())
}

// run runs a command, its output in the error if it fails.
func run(name string, args ...string) error {
	_, err := output(name, args...)
	return err
}

func output(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
