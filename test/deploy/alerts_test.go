package deploy

import (
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/tripswitch-dev/tripswitch/internal/metrics"
)

// exported returns the metric names the controller registers, with the
// series names a histogram adds. It describes the collectors NewMetrics
// registers: a registry's Gather would list only series that have values.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	if _, err := metrics.New(describing{ch}); err != nil {
		t.Fatal(err)
	}
	close(ch)
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		if m := re.FindStringSubmatch(d.String()); m != nil {
			for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
				names[m[1]+suffix] = true
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("found no exported metrics")
	}
	return names
}

// describing is a Registerer that describes what is registered with it.
type describing struct{ ch chan<- *prometheus.Desc }

func (d describing) Register(c prometheus.Collector) error { c.Describe(d.ch); return nil }
func (d describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		c.Describe(d.ch)
	}
}
func (d describing) Unregister(prometheus.Collector) bool { return false }

// metricNames parses expr and returns the metric names it selects.
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Fatalf("PromQL %q: %v", expr, err)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// TestAlertRulesParseAndNameExportedMetrics: the PrometheusRule's groups
// load with Prometheus' own rule loader (which parses every expression and
// template), and name only metrics the controller exports (and `up`).
// shippedGroups are config/prometheus/rules.yaml's rule groups, as
// Prometheus loads them.
func shippedGroups(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatal(err)
	}
	groupsYAML, err := yaml.JSONToYAML(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(groupsYAML, false, model.LegacyValidation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("rules do not load: %v", errs)
	}
	return groups
}

func TestAlertRulesParseAndNameExportedMetrics(t *testing.T) {
	groups := shippedGroups(t)
	known := exported(t)
	known["up"] = true
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			for _, name := range metricNames(t, r.Expr) {
				if !known[name] {
					t.Errorf("alert %s uses %s, which the controller does not export", r.Alert, name)
				}
			}
		}
	}
	slices.Sort(alerts)
	if want := "TripswitchAbsentWhileCircuitOpen TripswitchCircuitOpenTooLong TripswitchProbeFailingWhileClosed TripswitchRepeatedExternalChange TripswitchWriteBudgetExhausted"; strings.Join(alerts, " ") != want {
		t.Fatalf("alerts %v, want %s", alerts, want)
	}
}

// TestDashboardQueriesParse: every query of the Grafana dashboard parses as
// PromQL (Grafana's variables substituted) and names exported metrics.
func TestDashboardQueriesParse(t *testing.T) {
	data, err := os.ReadFile(repoPath(t, "config", "prometheus", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	known := exported(t)
	vars := strings.NewReplacer("$__rate_interval", "5m", "$breaker", ".*")
	n := 0
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			n++
			for _, name := range metricNames(t, vars.Replace(q.Expr)) {
				if !known[name] {
					t.Errorf("panel %q uses %s, which the controller does not export", p.Title, name)
				}
			}
		}
	}
	if n < 5 {
		t.Fatalf("only %d queries", n)
	}
}
