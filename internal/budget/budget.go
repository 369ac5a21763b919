// Package budget is the write budget of an outage window: what each write
// tripswitch makes to a webhook configuration costs, and whether the window
// still allows it. It is pure: the breaker's status holds the window
// (v1alpha1.OutageWindow), the controller counts every write there before
// it sends it, and the one code path that patches a configuration
// (circuit.Writer) asks Spend first and refuses a write the window does not
// allow.
//
// The rule: a window allows one open, one write to close the circuit or
// drop its record, and two for each half-open trial (its start and its
// end). A second open in the same window is always refused: an open that
// was undone, whatever undid it, is not made again until the evidence that
// began the window says the webhook is healthy again, or an operator
// re-arms the breaker. A close, a drop or a trial's end gives back what
// was, so it may use one write of slack past the limit (a write counted
// before a crash kept it from being sent); past that it is refused too.
// An operator's edit of the breaker's spec is a new instruction: the
// window's counts start again for the new generation.
package budget

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Write is a write to a configuration, as the budget counts it.
type Write string

// Writes.
const (
	// Open fails the webhook open (the open action, and the record).
	Open Write = "Open"
	// Close restores what the record says and removes it.
	Close Write = "Close"
	// Drop removes a record whose change someone else undid.
	Drop Write = "Drop"
	// TrialStart starts a half-open trial on an open circuit.
	TrialStart Write = "TrialStart"
	// TrialEnd ends a failed trial: back to the full open action.
	TrialEnd Write = "TrialEnd"
)

// ErrExhausted is wrapped by the error of a write the window does not allow.
var ErrExhausted = errors.New("write budget exhausted")

// Base is what a window allows without trials: the open and one write to
// close it or drop its record.
const Base = 2

// slack is how far past the limit a write that gives back what was (a
// close, a drop, a trial's end) may go: one write counted before a crash
// kept it from being sent.
const slack = 1

// Limit is how many writes w allows: Base, and 2 for each trial started.
func Limit(w *v1alpha1.OutageWindow) int32 {
	if w == nil {
		return Base
	}
	return Base + 2*w.Trials
}

// Begin is what starts a window: when, on what evidence, and on which
// configuration.
type Begin struct {
	At       metav1.Time
	Evidence v1alpha1.OutageEvidence
	UID      types.UID
	// Version is the configuration's resourceVersion the write was
	// decided on.
	Version string
}

// Counts returns w's counts for the breaker's spec generation gen: w's own,
// or none when the spec changed since (or there is no window).
func Counts(w *v1alpha1.OutageWindow, gen int64) (opens, trials, writes int32) {
	if w == nil || w.Generation != gen {
		return 0, 0, 0
	}
	return w.Opens, w.Trials, w.Writes
}

// Allow reports whether w allows write for a breaker at spec generation
// gen; the error wraps ErrExhausted and says why not.
func Allow(w *v1alpha1.OutageWindow, gen int64, write Write) error {
	opens, trials, writes := Counts(w, gen)
	limit := int32(Base) + 2*trials
	switch write {
	case Open:
		if opens > 0 {
			return fmt.Errorf("%w: this outage's open was made at %s, and an open is made once an outage: "+
				"it comes back only once the webhook is seen healthy again (%s), or with the tripswitch.dev/rearm annotation",
				ErrExhausted, openedAt(w), evidenceSays(w.Evidence))
		}
		if writes+1 > limit {
			return fmt.Errorf("%w: %d writes to the configuration in this outage, of %d", ErrExhausted, writes, limit)
		}
	case TrialStart:
		// A trial pays for itself: its start and its end.
	case Close, Drop, TrialEnd:
		if writes+1 > limit+slack {
			return fmt.Errorf("%w: %d writes to the configuration in this outage, of %d", ErrExhausted, writes, limit)
		}
	default:
		return fmt.Errorf("budget: unknown write %q", write)
	}
	return nil
}

// Spend returns the window after write, or an error wrapping ErrExhausted
// if w does not allow it. A write with no window begins one (b); a write on
// an earlier generation's counts starts them again. An open also records
// when it was made (opened) and with which action; every write, the
// configuration's version it was decided on (b.Version).
func Spend(w *v1alpha1.OutageWindow, gen int64, write Write, b Begin, opened *metav1.Time, action v1alpha1.OpenAction) (*v1alpha1.OutageWindow, error) {
	if err := Allow(w, gen, write); err != nil {
		return nil, err
	}
	next := Start(w, b)
	next.BasedOn = b.Version
	if next.Generation != gen {
		next.Generation, next.Opens, next.Trials, next.Writes = gen, 0, 0, 0
	}
	next.Writes++
	switch write {
	case Open:
		next.Opens++
		next.Held, next.Action, next.ConfigurationUID = true, action, b.UID
		if opened != nil {
			next.OpenedAt = opened.DeepCopy()
		}
	case TrialStart:
		next.Trials++
	case Close, Drop:
		next.Held = false
	}
	next.Budget = Limit(next)
	return next, nil
}

// Start returns a copy of w, or a new window begun at b when there is none.
func Start(w *v1alpha1.OutageWindow, b Begin) *v1alpha1.OutageWindow {
	if w != nil {
		return w.DeepCopy()
	}
	ev := b.Evidence
	if ev == "" {
		ev = v1alpha1.EvidenceProbes
	}
	return &v1alpha1.OutageWindow{StartedAt: b.At, Evidence: ev, ConfigurationUID: b.UID, Budget: Base}
}

// Unsent returns w without its open when that open was counted but never
// applied: w holds it, yet the configuration (of UID uid, at resourceVersion
// version) has no record of it and is still at the version the open was
// decided on (a crash, or an error that said nothing, came between the
// count and the write). Else w.
func Unsent(w *v1alpha1.OutageWindow, uid types.UID, version string, recorded bool) *v1alpha1.OutageWindow {
	if w == nil || !w.Held || recorded || w.Opens == 0 || w.BasedOn == "" || w.BasedOn != version || w.ConfigurationUID != uid {
		return w
	}
	out := w.DeepCopy()
	out.Opens--
	out.Writes--
	out.Held, out.OpenedAt, out.BasedOn = false, nil, ""
	return out
}

// Infer returns the window a breaker is in when its status has none but its
// open circuit's record is on the configuration (written before windows
// were kept, or the window ended by a re-arm while the circuit stayed
// open): one open made and held, counted for generation gen.
func Infer(rec *v1alpha1.CircuitRecord, uid types.UID, gen int64) *v1alpha1.OutageWindow {
	w := &v1alpha1.OutageWindow{StartedAt: rec.OpenedAt, Evidence: v1alpha1.EvidenceProbes, ConfigurationUID: uid, Action: rec.Action,
		OpenedAt: rec.OpenedAt.DeepCopy(), Held: true, Generation: gen, Opens: 1, Writes: 1}
	if rec.Trial != nil {
		w.Trials, w.Writes = 1, 2
	}
	w.Budget = Limit(w)
	return w
}

func openedAt(w *v1alpha1.OutageWindow) string {
	if w == nil || w.OpenedAt == nil {
		return "the start of the outage"
	}
	return w.OpenedAt.UTC().Format(time.RFC3339)
}

// evidenceSays is what ends a window begun on ev.
func evidenceSays(ev v1alpha1.OutageEvidence) string {
	if ev == v1alpha1.EvidenceAPIServer {
		return "the API server's own calls to it pass again"
	}
	return "healthy probes"
}
