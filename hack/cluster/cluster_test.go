package cluster

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Every rule the cluster adds to the host's own chains must match a cluster
// address: the host's other traffic never enters the cluster's chains.
func TestJumpsMatchOnlyClusterAddresses(t *testing.T) {
	for _, j := range jumps() {
		i := slices.IndexFunc(j, func(s string) bool { return s == "-d" || s == "-s" })
		if i < 0 || i+1 >= len(j) || (j[i+1] != PodCIDR.String() && j[i+1] != ServiceCIDR.String()) {
			t.Errorf("rule %q in %s matches more than the cluster's addresses", strings.Join(j, " "), j[0])
		}
	}
}

func TestJumpsToKube(t *testing.T) {
	for _, tc := range []struct {
		rule string
		want bool
	}{
		{"-A PREROUTING -m comment --comment kubernetes -j KUBE-SERVICES", true},
		{"-A OUTPUT -g KUBE-MARK-MASQ", true},
		{"-A OUTPUT -d 10.244.0.0/16 -j TS-CLUSTER", false},
		{"-A FORWARD -m comment --comment KUBE-FORWARD -j ACCEPT", false},
	} {
		if got := jumpsToKube(strings.Fields(tc.rule)); got != tc.want {
			t.Errorf("jumpsToKube(%q) = %v, want %v", tc.rule, got, tc.want)
		}
	}
}

// The configuration files parse, and say what this host needs.
func TestConfigs(t *testing.T) {
	l := Layout{Data: "/d", State: "/s", Cache: "/c"}
	var cni map[string]any
	if err := json.Unmarshal([]byte(strings.Replace(cniConfig, "@IPAM@", "/s/ipam", 1)), &cni); err != nil {
		t.Fatalf("CNI configuration: %v", err)
	}
	if p := cni["plugins"].([]any)[0].(map[string]any); p["ipMasq"] != false || p["bridge"] != Bridge {
		t.Errorf("CNI bridge: %v", p)
	}
	var kubelet map[string]any
	if err := yaml.Unmarshal([]byte(kubeletConfig(l)), &kubelet); err != nil {
		t.Fatalf("kubelet configuration: %v", err)
	}
	if kubelet["failCgroupV1"] != false || kubelet["cgroupDriver"] != "cgroupfs" || kubelet["imageGCHighThresholdPercent"] != float64(100) {
		t.Errorf("kubelet configuration: failCgroupV1 %v, cgroupDriver %v, imageGCHighThresholdPercent %v",
			kubelet["failCgroupV1"], kubelet["cgroupDriver"], kubelet["imageGCHighThresholdPercent"])
	}
	var proxy map[string]any
	if err := yaml.Unmarshal([]byte(kubeProxyConfig(l)), &proxy); err != nil {
		t.Fatalf("kube-proxy configuration: %v", err)
	}
	if ct := proxy["conntrack"].(map[string]any); ct["maxPerCore"] != float64(0) || ct["tcpEstablishedTimeout"] != "0s" {
		t.Errorf("kube-proxy would change the host's conntrack settings: %v", ct)
	}
	if c := containerdConfig(l); !strings.Contains(c, "restrict_oom_score_adj = true") || !strings.Contains(c, `root = "/d/containerd"`) {
		t.Errorf("containerd configuration:\n%s", c)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/var/lib/a\040b`); got != "/var/lib/a b" {
		t.Errorf("unescapeMount: %q", got)
	}
}
