package clusterlimit

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// Open is one open circuit, as its record on a configuration says.
type Open struct {
	Breaker  string
	UID      types.UID
	OpenedAt time.Time
}

// Candidate is a breaker that would open now.
type Candidate struct {
	Breaker string
	UID     types.UID
	// ThresholdAt is when the breaker reached its threshold for this outage.
	// The caller must take it from what survives a failover (the breaker's
	// status), so every leader orders the same way.
	ThresholdAt time.Time
}

// Refusal is a candidate that may not open yet.
type Refusal struct {
	Candidate
	// Position is its place in line, 1 for the next to open.
	Position int
	// Message explains it for the OpenRefused condition (reason ClusterLimit).
	Message string
}

// Decision is what the limit allows now.
type Decision struct {
	// Allowed may open, in order. A candidate whose circuit is already open
	// (it has a record) is allowed and takes no new place.
	Allowed []Candidate
	// Refused wait, in order.
	Refused []Refusal
	// OpenCount is how many circuits are open, counted on the records.
	OpenCount int
}

// Decide applies --max-open-circuits max (0 or less: no limit) to the
// candidates, given every open circuit in the cluster.
func Decide(max int, open []Open, want []Candidate) Decision {
	isOpen := map[types.UID]bool{}
	d := Decision{}
	for _, o := range open {
		switch {
		case o.UID == "":
			// A corrupt record is one circuit: what cannot be read may
			// well be failing open.
			d.OpenCount++
		case !isOpen[o.UID]:
			isOpen[o.UID] = true
			d.OpenCount++
		}
	}
	queue := slices.Clone(want)
	slices.SortStableFunc(queue, func(a, b Candidate) int {
		if c := a.ThresholdAt.Compare(b.ThresholdAt); c != 0 {
			return c
		}
		if c := strings.Compare(a.Breaker, b.Breaker); c != 0 {
			return c
		}
		return strings.Compare(string(a.UID), string(b.UID))
	})
	free := max - d.OpenCount
	seen := map[types.UID]bool{}
	for _, c := range queue {
		if seen[c.UID] {
			continue
		}
		seen[c.UID] = true
		switch {
		case isOpen[c.UID] || max <= 0:
			d.Allowed = append(d.Allowed, c)
		case free > 0:
			d.Allowed = append(d.Allowed, c)
			free--
		default:
			r := Refusal{Candidate: c, Position: len(d.Refused) + 1}
			r.Message = fmt.Sprintf("%d of at most %d circuits are open (--max-open-circuits); this breaker reached its threshold at %s and is number %d in line to open",
				d.OpenCount, max, c.ThresholdAt.UTC().Format(time.RFC3339), r.Position)
			d.Refused = append(d.Refused, r)
		}
	}
	return d
}

// Position reports whether uid may open, and else its place in line (0 when
// it is not a candidate).
func (d Decision) Position(uid types.UID) (allowed bool, position int, message string) {
	for _, c := range d.Allowed {
		if c.UID == uid {
			return true, 0, ""
		}
	}
	for _, r := range d.Refused {
		if r.UID == uid {
			return false, r.Position, r.Message
		}
	}
	return false, 0, ""
}

// Records returns every open circuit recorded on cfgs. A record that cannot
// be read is counted (with an empty UID) and its error returned alongside,
// so a corrupt annotation never lets more circuits open.
func Records(cfgs []*circuit.Configuration) ([]Open, []error) {
	var out []Open
	var errs []error
	for _, cfg := range cfgs {
		ann := cfg.Object.GetAnnotations()
		keys := make([]string, 0, len(ann))
		for k := range ann {
			if strings.HasPrefix(k, circuit.AnnotationPrefix) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			rec, err := readRecord(ann, k)
			if err != nil {
				errs = append(errs, fmt.Errorf("record %s on %s: %w", k, cfg.Object.GetName(), err))
				out = append(out, Open{})
				continue
			}
			out = append(out, Open{Breaker: rec.Breaker, UID: rec.BreakerUID, OpenedAt: rec.OpenedAt.Time})
		}
	}
	return out, errs
}

// readRecord reads the record under key, whose webhook name is inside it
// (a long name's key is shortened with a hash, so the key alone cannot say).
func readRecord(ann map[string]string, key string) (*v1alpha1.CircuitRecord, error) {
	var head struct {
		Webhook string `json:"webhook"`
	}
	if err := json.Unmarshal([]byte(ann[key]), &head); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", circuit.ErrCorruptRecord, err)
	}
	if circuit.AnnotationKey(head.Webhook) != key {
		return nil, fmt.Errorf("%w: it names webhook %q, whose key is another", circuit.ErrCorruptRecord, head.Webhook)
	}
	return circuit.ReadRecord(ann, head.Webhook)
}
