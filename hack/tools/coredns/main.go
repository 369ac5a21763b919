// Command coredns is CoreDNS with only the plugins the cluster's DNS uses:
// the kubernetes plugin answers for cluster.local, the rest is its usual
// company (errors, health, ready, cache, loadbalance, reload). There is no
// forward plugin: the cluster resolves nothing outside itself, so no query
// from a Pod leaves the machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives is CoreDNS's own plugin order (plugin.cfg), cut to the plugins
// linked above; a Corefile may use only these.
var directives = []string{"reload", "ready", "health", "errors", "log", "loadbalance", "cache", "kubernetes"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
