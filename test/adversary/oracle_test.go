package adversary_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"
	"pgregory.net/rapid"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// The oracle knows tripswitch only by what docs/safety.md promises and by
// the marks it leaves: its record annotation, its matchCondition, the
// expression of a trial.
const conditionName = circuit.MatchConditionName

func recordKey(webhook string) string { return circuit.AnnotationKey(webhook) }

// maxWarnings bounds the Warning events a breaker may raise in one outage:
// the open, a disarm and its reason, an owner's verdict, a trial or two,
// each said once, not once per reconcile.
const maxWarnings = 20

// check holds the history so far to the promises that hold at every
// moment: within an outage, at most one open per instruction (the
// breaker's spec, edited or recreated, is a new one) and at most 2 writes
// per instruction plus 2 per half-open trial; never an open, nor a trial,
// after someone undid the open, until the operator says otherwise; and
// never a write of a field someone else changed while the circuit was
// open.
func (c *seqCase) check(rt *rapid.T) {
	writes := c.writesSince(c.episode)
	instructions := 1 + len(c.edits)
	var opens, trials int
	for _, w := range writes {
		switch kind(w) {
		case "open":
			opens++
		case "trial":
			trials++
		}
	}
	if opens > instructions || len(writes) > 2*instructions+2*trials {
		c.fail(rt, "%d writes to the configuration in one outage (%d opens, %d trials) under %d instruction(s) of the breaker's; the budget is one open and 2 writes each, and 2 per trial: %v",
			len(writes), opens, trials, instructions, kinds(writes))
	}
	e := c.episodeHistory()
	for _, w := range writes {
		k := kind(w)
		if (k == "open" || k == "trial") && !e.undoneAt.IsZero() && w.at.After(e.undoneAt) && !c.editedBetween(e.undoneAt, w.at) {
			c.fail(rt, "tripswitch's %s at %s came after %s undid its open at %s, with no instruction of the operator's in between",
				k, w.at.Format("15:04:05.000"), e.undoneBy, e.undoneAt.Format("15:04:05.000"))
		}
	}
	if e.overwrote != "" {
		c.fail(rt, "%s", e.overwrote)
	}
}

// episodeView is what the history of the current episode says.
type episodeView struct {
	// undoneAt is when someone other than tripswitch first undid an open it
	// held, and who (their field manager); undos are all of them.
	undoneAt time.Time
	undoneBy string
	undos    []undo
	// overwrote, when set, says how tripswitch wrote a field someone else
	// had changed while its circuit was open.
	overwrote string
	// last is the last version written by someone other than tripswitch.
	last *admissionregistrationv1.MutatingWebhookConfiguration
}

type undo struct {
	at time.Time
	by string
}

// episodeHistory walks every version of the configuration, each
// attributed to tripswitch (its writes, as the proxy saw them) or to
// someone else (the rest).
func (c *seqCase) episodeHistory() episodeView {
	ours := map[string]bool{}
	var firstOpen int64
	for _, w := range c.w.rec.applied(c.name) {
		ours[w.after.ResourceVersion] = true
		if kind(w) == "open" && !w.at.Before(c.episode) && firstOpen == 0 {
			firstOpen = revision(w.after)
		}
	}
	var e episodeView
	changed := map[string]string{} // field -> who changed it while open
	// base is the version tripswitch's first open in the episode was
	// written on: a field someone puts back to its value there holds no
	// choice of theirs that a write could go over.
	var base *admissionregistrationv1.MutatingWebhookConfiguration
	var prev *admissionregistrationv1.MutatingWebhookConfiguration
	var last time.Time
	for _, v := range c.hist.upTo(time.Now().Add(-300 * time.Millisecond)) {
		mine := v.obj != nil && ours[v.obj.ResourceVersion]
		inEpisode := !v.seen.Before(c.episode)
		if slices.ContainsFunc(c.recreated, func(t time.Time) bool { return t.After(last) && !t.After(v.seen) }) {
			clear(changed) // a new breaker: a new approval, and a window of its own
		}
		last = v.seen
		if !mine {
			e.last = v.obj
		}
		switch {
		case !mine && inEpisode:
			by := writer(v.obj)
			if held(prev, c.webhook) && undoes(prev, v.obj, c.webhook) {
				e.undos = append(e.undos, undo{at: v.seen, by: by})
				if e.undoneAt.IsZero() {
					e.undoneAt, e.undoneBy = v.seen, by
				}
			}
			// Only a change made while tripswitch held an open is a
			// choice made over it (a recreate while nothing was held is
			// a configuration a later open may be written to).
			if firstOpen != 0 && v.rv > firstOpen && held(prev, c.webhook) {
				for _, f := range changes(prev, v.obj, c.webhook) {
					if f != "*" && base != nil && base.UID == v.obj.UID && value(base, c.webhook, f) == value(v.obj, c.webhook, f) {
						delete(changed, f)
						continue
					}
					changed[f] = by
				}
			}
		case mine && inEpisode:
			if v.rv == firstOpen {
				base = prev
			}
			for _, f := range changes(prev, v.obj, c.webhook) {
				if by, ok := changed[f]; ok || changed["*"] != "" {
					if !ok {
						by = changed["*"]
					}
					e.overwrote = fmt.Sprintf("tripswitch changed %s at %s, which %s had changed while its circuit was open", f, v.seen.Format("15:04:05.000"), by)
				}
			}
		}
		prev = v.obj
	}
	return e
}

// checkEpisode holds the episode that a recovery ended to what holds once
// everything settled: the configuration is exactly what its last writer
// other than tripswitch wanted, with tripswitch's open given back and no
// trace of it; every undo was said in an event on the breaker; and the
// breaker raised no storm of warnings.
func (c *seqCase) checkEpisode(rt *rapid.T) {
	e := c.episodeHistory()
	cfg, err := c.config()
	if err != nil {
		c.fail(rt, "after the recovery: %v", err)
	}
	if e.last != nil {
		want := strip(e.last, c.webhook)
		got := cfg.DeepCopy()
		if g, w := jsonOf(got.Webhooks), jsonOf(want.Webhooks); g != w || !maps.Equal(got.Annotations, want.Annotations) {
			c.fail(rt, "after the recovery the configuration is not what its last writer other than tripswitch (%s) wanted, tripswitch's open given back:\ngot  %s %v\nwant %s %v",
				writer(e.last), g, got.Annotations, w, want.Annotations)
		}
	}
	events, err := c.w.cs.CoreV1().Events("default").List(c.ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", c.name).String()})
	if err != nil {
		c.fail(rt, "list events: %v", err)
	}
	warnings := 0
	for _, u := range e.undos {
		said := slices.ContainsFunc(events.Items, func(ev corev1.Event) bool {
			return ev.Type == "Warning" && slices.Contains([]string{"ExternalChange", "RecordRemovedExternally", "Disarmed", "WriteBudgetExhausted"}, ev.Reason) &&
				!eventTime(ev).Before(u.at.Add(-2*time.Second))
		})
		if !said {
			c.fail(rt, "%s undid the open at %s, and no event on the breaker said so", u.by, u.at.Format("15:04:05.000"))
		}
	}
	for _, ev := range events.Items {
		if ev.Type == "Warning" && !eventTime(ev).Before(c.episode) {
			warnings += int(max(ev.Count, 1))
			if ev.Series != nil {
				warnings += int(ev.Series.Count) - 1
			}
		}
	}
	if warnings > maxWarnings {
		c.fail(rt, "%d Warning events in one outage, more than %d: a storm", warnings, maxWarnings)
	}
}

// writesSince are tripswitch's applied writes of the case's configuration
// from t on.
func (c *seqCase) writesSince(t time.Time) []write {
	var out []write
	for _, w := range c.w.rec.applied(c.name) {
		if !w.at.Before(t) {
			out = append(out, w)
		}
	}
	return out
}

// editedBetween reports whether the operator edited (or recreated) the
// breaker between from and to.
func (c *seqCase) editedBetween(from, to time.Time) bool {
	return slices.ContainsFunc(c.edits, func(e time.Time) bool { return e.After(from) && e.Before(to) })
}

// kind says what one of tripswitch's writes did: "open" (it added its
// record), "trial" (it set a sample expression), else "other" (a close, a
// drop, a trial's end).
func kind(w write) string {
	for _, op := range w.ops {
		v, _ := op.Value.(string)
		switch {
		case op.Op == "add" && (op.Path == "/metadata/annotations" || strings.HasPrefix(op.Path, "/metadata/annotations/tripswitch.dev~1circuit.")):
			return "open"
		case op.Op == "replace" && strings.HasSuffix(op.Path, "/expression") && strings.HasPrefix(v, circuit.SamplePrefix):
			return "trial"
		}
	}
	return "other"
}

func kinds(ws []write) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = kind(w) + "@" + w.at.Format("15:04:05.000")
	}
	return out
}

// writer names the field manager of the latest write of cfg.
func writer(cfg *admissionregistrationv1.MutatingWebhookConfiguration) string {
	if cfg == nil {
		return "a deletion"
	}
	var latest metav1.ManagedFieldsEntry
	for _, mf := range cfg.ManagedFields {
		if mf.Time != nil && (latest.Time == nil || !mf.Time.Before(latest.Time)) {
			latest = mf
		}
	}
	return latest.Manager
}

// revision is cfg's resourceVersion as the number etcd gives it: versions
// of one object compare by it.
func revision(cfg *admissionregistrationv1.MutatingWebhookConfiguration) int64 {
	n, _ := strconv.ParseInt(cfg.ResourceVersion, 10, 64)
	return n
}

// record is tripswitch's record of webhook on cfg, nil when none.
func record(cfg *admissionregistrationv1.MutatingWebhookConfiguration, webhook string) *v1alpha1.CircuitRecord {
	if cfg == nil {
		return nil
	}
	raw, ok := cfg.Annotations[recordKey(webhook)]
	if !ok {
		return nil
	}
	var rec v1alpha1.CircuitRecord
	if json.Unmarshal([]byte(raw), &rec) != nil {
		return nil
	}
	return &rec
}

// held reports whether cfg carries tripswitch's record of webhook.
func held(cfg *admissionregistrationv1.MutatingWebhookConfiguration, webhook string) bool {
	return record(cfg, webhook) != nil
}

func entry(cfg *admissionregistrationv1.MutatingWebhookConfiguration, webhook string) *admissionregistrationv1.MutatingWebhook {
	if cfg == nil {
		return nil
	}
	for i := range cfg.Webhooks {
		if cfg.Webhooks[i].Name == webhook {
			return &cfg.Webhooks[i]
		}
	}
	return nil
}

func condition(h *admissionregistrationv1.MutatingWebhook, name string) *admissionregistrationv1.MatchCondition {
	for i := range h.MatchConditions {
		if h.MatchConditions[i].Name == name {
			return &h.MatchConditions[i]
		}
	}
	return nil
}

func policyOf(h *admissionregistrationv1.MutatingWebhook) string {
	if h == nil || h.FailurePolicy == nil {
		return ""
	}
	return string(*h.FailurePolicy)
}

// intact reports whether what rec says tripswitch set is still on h.
func intact(rec *v1alpha1.CircuitRecord, h *admissionregistrationv1.MutatingWebhook) bool {
	if h == nil {
		return false
	}
	switch rec.Action {
	case v1alpha1.OpenActionIgnore:
		return policyOf(h) == rec.SetFailurePolicy
	case v1alpha1.OpenActionBypass:
		cond := condition(h, rec.MatchCondition)
		if cond == nil {
			return false
		}
		if rec.Trial != nil {
			return cond.Expression == rec.Trial.Expression && policyOf(h) == rec.Trial.SetFailurePolicy
		}
		return cond.Expression == "false"
	}
	return false
}

// undoes reports whether cur took away the open prev held: its record,
// what it set, or the whole configuration.
func undoes(prev, cur *admissionregistrationv1.MutatingWebhookConfiguration, webhook string) bool {
	rec := record(prev, webhook)
	if rec == nil || !intact(rec, entry(prev, webhook)) {
		return false
	}
	if cur == nil || cur.UID != prev.UID {
		return true
	}
	now := record(cur, webhook)
	return now == nil || !intact(now, entry(cur, webhook))
}

// changes are the fields of webhook that differ from prev to cur: its
// failurePolicy and each matchCondition by name; "*" when the
// configuration itself went or came.
func changes(prev, cur *admissionregistrationv1.MutatingWebhookConfiguration, webhook string) []string {
	if prev == nil || cur == nil || prev.UID != cur.UID {
		return []string{"*"}
	}
	a, b := entry(prev, webhook), entry(cur, webhook)
	if a == nil || b == nil {
		return []string{"*"}
	}
	var out []string
	if policyOf(a) != policyOf(b) {
		out = append(out, "failurePolicy")
	}
	names := map[string]bool{}
	for _, m := range append(slices.Clone(a.MatchConditions), b.MatchConditions...) {
		names[m.Name] = true
	}
	for name := range names {
		x, y := condition(a, name), condition(b, name)
		if (x == nil) != (y == nil) || x != nil && x.Expression != y.Expression {
			out = append(out, "matchCondition "+name)
		}
	}
	return out
}

// value is field f (as changes names it) of webhook in cfg.
func value(cfg *admissionregistrationv1.MutatingWebhookConfiguration, webhook, f string) string {
	h := entry(cfg, webhook)
	if h == nil {
		return "<no webhook>"
	}
	if f == "failurePolicy" {
		return policyOf(h)
	}
	if m := condition(h, strings.TrimPrefix(f, "matchCondition ")); m != nil {
		return m.Expression
	}
	return "<none>"
}

// strip is cfg as it is once tripswitch has given back what its record
// on cfg says it holds: an open still in place is closed (the failurePolicy
// and the matchConditions as the record says they were); of an open
// someone undid, what is still tripswitch's (a trial's sample, its
// Ignore) is removed; the record goes.
func strip(cfg *admissionregistrationv1.MutatingWebhookConfiguration, webhook string) *admissionregistrationv1.MutatingWebhookConfiguration {
	out := cfg.DeepCopy()
	rec := record(out, webhook)
	if rec == nil {
		return out
	}
	delete(out.Annotations, recordKey(webhook))
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	h := entry(out, webhook)
	if h == nil {
		return out
	}
	restore := func(set string) {
		if policyOf(h) != set {
			return
		}
		h.FailurePolicy = nil
		if rec.OriginalFailurePolicy != nil {
			h.FailurePolicy = ptr.To(admissionregistrationv1.FailurePolicyType(*rec.OriginalFailurePolicy))
		}
	}
	removeCondition := func(expr string) {
		if cond := condition(h, rec.MatchCondition); cond == nil || cond.Expression != expr {
			return
		}
		h.MatchConditions = slices.DeleteFunc(h.MatchConditions, func(m admissionregistrationv1.MatchCondition) bool { return m.Name == rec.MatchCondition })
		if len(h.MatchConditions) == 0 && rec.MatchConditionsWereUnset {
			h.MatchConditions = nil
		}
	}
	switch {
	case rec.Action == v1alpha1.OpenActionIgnore && intact(rec, h):
		restore(rec.SetFailurePolicy)
	case rec.Action == v1alpha1.OpenActionBypass && rec.Trial == nil && intact(rec, h):
		removeCondition("false")
	case rec.Trial != nil:
		// A trial, in place or cut short: what is still as it set goes.
		removeCondition(rec.Trial.Expression)
		restore(rec.Trial.SetFailurePolicy)
	}
	return out
}

func jsonOf(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

func equalJSON(a, b any) bool { return jsonOf(a) == jsonOf(b) }

// atomicCounter counts across sequences.
type atomicCounter struct{ atomic.Int64 }

// eventTime is when an event was last seen.
func eventTime(ev corev1.Event) time.Time {
	t := ev.LastTimestamp.Time
	for _, u := range []time.Time{ev.FirstTimestamp.Time, ev.EventTime.Time} {
		if u.After(t) {
			t = u
		}
	}
	if ev.Series != nil && ev.Series.LastObservedTime.After(t) {
		t = ev.Series.LastObservedTime.Time
	}
	return t
}
