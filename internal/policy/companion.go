package policy

import (
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// One outage trips a configuration's breakers together and one recovery
// heals them together, so one patch may write them all instead of each in
// turn behind the configuration's lock. A companion is decided exactly as
// its own reconcile would decide on the configuration just read (its fresh
// breaker, its own probes; without its API server signal, which can only
// open more and keep open longer, so a companion never opens or closes
// earlier than its own reconcile would). A breaker its own reconcile would
// not write now, or could not, is left to it.

// MayJoin reports whether o may have its circuit written in a patch of t's
// configuration made for another breaker: it names another webhook of the
// same configuration, is not being deleted, and holds its finalizer.
func MayJoin(t v1alpha1.Target, o *v1alpha1.WebhookCircuitBreaker) bool {
	ot := o.Spec.Target
	return ot.Kind == t.Kind && ot.ConfigurationName == t.ConfigurationName && ot.WebhookName != t.WebhookName &&
		o.DeletionTimestamp.IsZero() && controllerutil.ContainsFinalizer(o, v1alpha1.Finalizer)
}

// Joins decides o on obs (its webhook in the configuration just read, its
// own probes, no signal) and reports whether it makes write, and so joins
// the patch. A breaker whose webhook is missing, that is conflicted, or
// whose signal may still hold its circuit open never joins.
func Joins(write Write, o *v1alpha1.WebhookCircuitBreaker, obs Observed) (Decision, bool) {
	spec := o.Spec.Resolve()
	if obs.State.Index < 0 || obs.Conflict != "" || (write == WriteClose && spec.Signal != nil) {
		return Decision{}, false
	}
	if write == WriteOpen && spec.Fallback != nil {
		return Decision{}, false // its floor is armed first, so it opens in its own patch
	}
	d := Decide(NewInput(o, spec, obs))
	return d, d.Write == write
}
