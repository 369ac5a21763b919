// Package floor arms and disarms a breaker's fallback policy (a
// ValidatingAdmissionPolicy or MutatingAdmissionPolicy the operator wrote):
// the floor a circuit fails open to.
//
// While the circuit is closed the policy is inert: tripswitch holds a
// matchCondition named tripswitch.dev/circuit-open with the expression
// "false" on it, the mechanism of the Bypass action applied to the policy,
// so the operator's binding never changes. Arming removes that condition,
// disarming puts it back where it stood. Every write is one JSON Patch that
// changes the condition and the record annotation (tripswitch.dev/floor)
// together, pinned to the resourceVersion read, with test operations on
// what it removes: as a circuit's writes are (see package circuit).
//
// The order of writes is the caller's: arm the floor, then open the
// webhook; restore the webhook, then disarm the floor. A crash between two
// writes then leaves the floor armed while the webhook is back (stricter,
// never looser), and Arm and Disarm are idempotent so the next reconcile
// finishes the step.
package floor

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/jsonpatch"
)

const (
	// AnnotationKey holds the floor's record on the policy.
	AnnotationKey = "tripswitch.dev/floor"
	// MatchConditionName is the condition that keeps the policy inert: the
	// same name as the Bypass action's, so one rule reads both.
	MatchConditionName = circuit.MatchConditionName
	// MatchConditionExpression never matches, so the policy never applies.
	MatchConditionExpression = circuit.MatchConditionExpression

	// maxMatchConditions is the API server's limit per policy.
	maxMatchConditions = 64
)

var (
	// ErrCorruptRecord means the record annotation cannot be trusted;
	// tripswitch reports it and never guesses from it.
	ErrCorruptRecord = errors.New("corrupt floor record")
	// ErrOwnedByOther means another breaker's record is on the policy: one
	// policy is the floor of one breaker.
	ErrOwnedByOther = errors.New("fallback policy belongs to another breaker")
	// ErrForeignCondition means a matchCondition named
	// tripswitch.dev/circuit-open is on the policy with an expression other
	// than "false": not tripswitch's, and never touched.
	ErrForeignCondition = errors.New("fallback policy has a tripswitch.dev/circuit-open matchCondition that is not false")
	// ErrExternalChange means someone else added or removed tripswitch's
	// condition since its last write (the record and the policy disagree).
	// tripswitch never fights that: Arm, Disarm and Release refuse, and
	// Drop lets go of the record, leaving the policy as it is.
	ErrExternalChange = errors.New("fallback policy's condition was changed by someone else")
	// ErrTooManyConditions means the policy has no room for the condition.
	ErrTooManyConditions = errors.New("fallback policy has the maximum number of matchConditions")
	// ErrNotServed means the API server does not serve the policy's kind at
	// admissionregistration.k8s.io/v1 (MutatingAdmissionPolicy before the
	// Kubernetes release that made it GA): the floor cannot be armed there.
	ErrNotServed = errors.New("this API server does not serve the fallback policy's kind at admissionregistration.k8s.io/v1")
)

// Owner is the breaker a floor belongs to.
type Owner struct {
	Breaker string
	UID     types.UID
}

// Policy is a fallback policy of either kind, as read.
type Policy struct {
	// Object is the typed object read from the API server; patches decode into it.
	Object client.Object
	// Kind is the policy's kind.
	Kind v1alpha1.FallbackPolicyKind
	// MatchConditions are the policy's, in order.
	MatchConditions []admissionregistrationv1.MatchCondition
}

// Name is Kind/name, as records and status show it.
func (p *Policy) Name() string { return string(p.Kind) + "/" + p.Object.GetName() }

// NewObject returns an empty typed object for kind.
func NewObject(kind v1alpha1.FallbackPolicyKind) (client.Object, error) {
	switch kind {
	case v1alpha1.ValidatingAdmissionPolicy:
		return &admissionregistrationv1.ValidatingAdmissionPolicy{}, nil
	case v1alpha1.MutatingAdmissionPolicy:
		return &admissionregistrationv1.MutatingAdmissionPolicy{}, nil
	}
	return nil, fmt.Errorf("whileOpen.fallbackPolicy.kind %q is not ValidatingAdmissionPolicy or MutatingAdmissionPolicy", kind)
}

// View returns the uniform view of a typed policy. Only View forks on the kind.
func View(obj client.Object) (*Policy, error) {
	switch o := obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		return &Policy{Object: o, Kind: v1alpha1.ValidatingAdmissionPolicy, MatchConditions: o.Spec.MatchConditions}, nil
	case *admissionregistrationv1.MutatingAdmissionPolicy:
		return &Policy{Object: o, Kind: v1alpha1.MutatingAdmissionPolicy, MatchConditions: o.Spec.MatchConditions}, nil
	}
	return nil, fmt.Errorf("%T is not a ValidatingAdmissionPolicy or MutatingAdmissionPolicy", obj)
}

// ReadRecord returns the floor record from annotations, nil if there is
// none, or an error wrapping ErrCorruptRecord.
func ReadRecord(annotations map[string]string) (*v1alpha1.FloorRecord, error) {
	raw, ok := annotations[AnnotationKey]
	if !ok {
		return nil, nil
	}
	var rec v1alpha1.FloorRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return nil, fmt.Errorf("%w: annotation %s is not JSON: %v", ErrCorruptRecord, AnnotationKey, err)
	}
	switch {
	case rec.BreakerUID == "":
		return nil, fmt.Errorf("%w: annotation %s: breakerUID is empty", ErrCorruptRecord, AnnotationKey)
	case rec.Policy == "":
		return nil, fmt.Errorf("%w: annotation %s: policy is empty", ErrCorruptRecord, AnnotationKey)
	case rec.ConditionIndex < 0 || rec.ConditionIndex > maxMatchConditions:
		return nil, fmt.Errorf("%w: annotation %s: conditionIndex %d is out of range", ErrCorruptRecord, AnnotationKey, rec.ConditionIndex)
	}
	return &rec, nil
}

// State is what a policy says about its floor.
type State struct {
	// Record is the floor record, nil when there is none or it is corrupt.
	Record *v1alpha1.FloorRecord
	// RecordErr wraps ErrCorruptRecord when the annotation cannot be trusted.
	RecordErr error
	// ConditionIndex is the position of tripswitch's matchCondition, or -1.
	ConditionIndex int
	// ConditionExpression is that condition's expression.
	ConditionExpression string
}

// Inspect reads the floor's state from p.
func Inspect(p *Policy) State {
	s := State{ConditionIndex: -1}
	for j, c := range p.MatchConditions {
		if c.Name == MatchConditionName {
			s.ConditionIndex, s.ConditionExpression = j, c.Expression
			break
		}
	}
	s.Record, s.RecordErr = ReadRecord(p.Object.GetAnnotations())
	return s
}

// Armed reports whether the policy applies: tripswitch's condition is absent.
func (s State) Armed() bool { return s.ConditionIndex < 0 }

// Inert reports whether tripswitch's "false" condition holds the policy off.
func (s State) Inert() bool {
	return s.ConditionIndex >= 0 && s.ConditionExpression == MatchConditionExpression
}

// Adopted reports whether tripswitch has a trustworthy record on the policy.
func (s State) Adopted() bool { return s.Record != nil }

// Drifted reports whether someone else changed the condition after
// tripswitch's last write: the record and the policy disagree.
func (s State) Drifted() bool {
	return s.Record != nil && s.Record.Armed != s.Armed()
}

// operation is one RFC 6902 operation.
type operation = jsonpatch.Op

const conditionsPath = "/spec/matchConditions"

func conditionPath(j int) string { return conditionsPath + "/" + strconv.Itoa(j) }

func recordPath() string {
	return "/metadata/annotations/" + jsonpatch.Pointer(AnnotationKey)
}

// check refuses what the floor must never write over.
func check(p *Policy, s State, owner Owner) error {
	if owner.UID == "" {
		return fmt.Errorf("floor of %s: the breaker's UID is empty", p.Name())
	}
	if s.RecordErr != nil {
		return fmt.Errorf("floor of %s: %w", p.Name(), s.RecordErr)
	}
	if s.Record != nil && s.Record.BreakerUID != owner.UID {
		return fmt.Errorf("floor of %s: %w: breaker %s (uid %s)", p.Name(), ErrOwnedByOther, s.Record.Breaker, s.Record.BreakerUID)
	}
	if s.ConditionIndex >= 0 && !s.Inert() {
		return fmt.Errorf("floor of %s: %w (expression %q)", p.Name(), ErrForeignCondition, s.ConditionExpression)
	}
	if s.Drifted() {
		return fmt.Errorf("floor of %s: %w: the record says armed=%v, the policy armed=%v", p.Name(), ErrExternalChange, s.Record.Armed, s.Armed())
	}
	return nil
}

// newRecord is the record of a first write (adoption).
func newRecord(p *Policy, s State, owner Owner, now metav1.Time) v1alpha1.FloorRecord {
	return v1alpha1.FloorRecord{Policy: p.Name(), Breaker: owner.Breaker, BreakerUID: owner.UID, AdoptedAt: now,
		ConditionPreexisted: s.ConditionIndex >= 0}
}

// patch assembles the precondition, the condition ops and the record op.
func patch(p *Policy, condOps []operation, rec *v1alpha1.FloorRecord) ([]byte, error) {
	ops := append([]operation{{Op: "replace", Path: "/metadata/resourceVersion", Value: p.Object.GetResourceVersion()}}, condOps...)
	if rec == nil {
		ops = append(ops, operation{Op: "remove", Path: recordPath()})
	} else {
		data, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("encode floor record: %w", err)
		}
		if p.Object.GetAnnotations() == nil {
			// A JSON Patch add cannot create intermediate objects.
			ops = append(ops, operation{Op: "add", Path: "/metadata/annotations", Value: map[string]string{AnnotationKey: string(data)}})
		} else {
			ops = append(ops, operation{Op: "add", Path: recordPath(), Value: string(data)})
		}
	}
	return json.Marshal(ops)
}

// removeOps remove tripswitch's condition at j, tested first.
func removeOps(p *Policy, j int) []operation {
	ops := []operation{
		{Op: "test", Path: conditionPath(j) + "/name", Value: MatchConditionName},
		{Op: "test", Path: conditionPath(j) + "/expression", Value: MatchConditionExpression},
	}
	if len(p.MatchConditions) == 1 {
		// An empty list is not stored; removing the field says so exactly.
		return append(ops, operation{Op: "remove", Path: conditionsPath})
	}
	return append(ops, operation{Op: "remove", Path: conditionPath(j)})
}

// addOps put tripswitch's condition at j (clamped to the list's end).
func addOps(p *Policy, j int) ([]operation, error) {
	cond := admissionregistrationv1.MatchCondition{Name: MatchConditionName, Expression: MatchConditionExpression}
	n := len(p.MatchConditions)
	if n >= maxMatchConditions {
		return nil, fmt.Errorf("floor of %s: %w (%d)", p.Name(), ErrTooManyConditions, maxMatchConditions)
	}
	if n == 0 {
		return []operation{{Op: "add", Path: conditionsPath, Value: []admissionregistrationv1.MatchCondition{cond}}}, nil
	}
	if j < 0 || j >= n {
		return []operation{{Op: "add", Path: conditionsPath + "/-", Value: cond}}, nil
	}
	return []operation{{Op: "add", Path: conditionPath(j), Value: cond}}, nil
}

// ArmPatch builds the one patch that arms the floor: it removes
// tripswitch's condition, so the policy applies, and writes the record
// (adopting the policy if this is the first write). It returns nil when the
// floor is already armed and recorded as such.
func ArmPatch(p *Policy, owner Owner, now metav1.Time) ([]byte, error) {
	s := Inspect(p)
	if err := check(p, s, owner); err != nil {
		return nil, err
	}
	rec := newRecord(p, s, owner, now)
	if s.Record != nil {
		rec = *s.Record
	}
	if s.Armed() && rec.Armed && s.Record != nil {
		return nil, nil
	}
	var ops []operation
	if !s.Armed() {
		ops = removeOps(p, s.ConditionIndex)
		rec.ConditionIndex = s.ConditionIndex
	}
	if !rec.Armed {
		rec.Armed, rec.ArmedAt = true, &now
	}
	return patch(p, ops, &rec)
}

// DisarmPatch builds the one patch that disarms the floor: it puts
// tripswitch's "false" condition back where it stood, so the policy is
// inert, and writes the record. With no record yet this is the adoption of
// the policy: the first write, which makes an operator's live policy inert
// (or, when the operator already wrote the condition, only records it). It
// returns nil when the floor is already disarmed and recorded as such.
func DisarmPatch(p *Policy, owner Owner, now metav1.Time) ([]byte, error) {
	s := Inspect(p)
	if err := check(p, s, owner); err != nil {
		return nil, err
	}
	rec := newRecord(p, s, owner, now)
	if s.Record != nil {
		rec = *s.Record
	}
	if s.Inert() && !rec.Armed && s.Record != nil {
		return nil, nil
	}
	var ops []operation
	if s.Armed() {
		at := rec.ConditionIndex
		if s.Record == nil {
			at = -1 // adoption: after the operator's own conditions
		}
		var err error
		if ops, err = addOps(p, at); err != nil {
			return nil, err
		}
	}
	// The disarmed record is the adopted one again, so a policy after a
	// cycle is byte-identical to the policy before it.
	rec.Armed, rec.ArmedAt, rec.ConditionIndex = false, nil, 0
	return patch(p, ops, &rec)
}

// ReleasePatch builds the patch that gives the policy back as tripswitch
// found it: the record removed, and the condition present exactly when the
// operator had written it (so a policy written inert stays inert, and one
// written live is live again). For a breaker being deleted, after its
// webhook is restored. It returns nil when there is no record.
func ReleasePatch(p *Policy, owner Owner) ([]byte, error) {
	s := Inspect(p)
	if err := check(p, s, owner); err != nil {
		return nil, err
	}
	if s.Record == nil {
		return nil, nil
	}
	var ops []operation
	switch {
	case s.Record.ConditionPreexisted && s.Armed():
		var err error
		if ops, err = addOps(p, s.Record.ConditionIndex); err != nil {
			return nil, err
		}
	case !s.Record.ConditionPreexisted && !s.Armed():
		ops = removeOps(p, s.ConditionIndex)
	}
	return patch(p, ops, nil)
}

// DropPatch builds the patch that removes the record and changes nothing
// else: for a policy whose condition someone else changed (ErrExternalChange).
// A later Arm or Disarm adopts the policy anew, as it then is.
func DropPatch(p *Policy, owner Owner) ([]byte, error) {
	s := Inspect(p)
	if s.Record == nil {
		return nil, nil
	}
	if s.Record.BreakerUID != owner.UID {
		return nil, fmt.Errorf("floor of %s: %w: breaker %s (uid %s)", p.Name(), ErrOwnedByOther, s.Record.Breaker, s.Record.BreakerUID)
	}
	return patch(p, nil, nil)
}
