package circuit

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// The trial's matchCondition samples requests on a random identifier of the
// request's object. The API server gives matchConditions no request uid (it
// builds their request without one), and CEL has no random function, so the
// key is the object's uid (a random UUID: set before validating admission on
// CREATE, and on every object that exists), else the old object's (DELETE),
// else the first owner's (a Pod a ReplicaSet creates, as a mutating webhook
// sees it before it has a uid). A request with none of them is not sampled.
// The first two hex digits of a random UUID are uniform, so a set of first
// digits, and of second digits after one more first digit, samples in steps
// of 1/256.
const (
	sampleKey = "(object != null && object.?metadata.?uid.orValue('') != '' ? object.metadata.uid : " +
		"oldObject != null && oldObject.?metadata.?uid.orValue('') != '' ? oldObject.metadata.uid : " +
		"object != null && object.?metadata.?ownerReferences.orValue([]).size() > 0 ? object.metadata.ownerReferences[0].?uid.orValue('') : '')"
	// SamplePrefix starts every trial expression; the admission guard allows
	// tripswitch's matchCondition no other expression but "false".
	SamplePrefix = sampleKey + ".matches('^"
	// SampleSuffix ends every trial expression.
	SampleSuffix = "')"
	hexDigits    = "0123456789abcdef"
)

// ErrCannotTrial means a trial cannot start or end on this webhook as the
// record describes.
var ErrCannotTrial = errors.New("cannot change the trial")

// SampleExpression returns the matchCondition expression that lets percent
// of requests reach the webhook (1 to 100, rounded up to a multiple of
// 1/256), and the share it samples, in percent, as applied.
func SampleExpression(percent int32) (string, string, error) {
	if percent < v1alpha1.MinHalfOpenSamplePercent || percent > v1alpha1.MaxHalfOpenSamplePercent {
		return "", "", fmt.Errorf("halfOpen.samplePercent %d is not between %d and %d", percent, v1alpha1.MinHalfOpenSamplePercent, v1alpha1.MaxHalfOpenSamplePercent)
	}
	n := v1alpha1.SampleSteps(percent) // of 256
	full, rest := n/16, n%16
	var alts []string
	if full > 0 {
		alts = append(alts, "["+hexDigits[:full]+"]")
	}
	if rest > 0 {
		alts = append(alts, hexDigits[full:full+1]+"["+hexDigits[:rest]+"]")
	}
	return SamplePrefix + "(" + strings.Join(alts, "|") + ")" + SampleSuffix, v1alpha1.SampleShare(percent), nil
}

// SamplePattern is the RE2 pattern, anchored, that every expression
// SampleExpression returns matches and no other does but those of the same
// form: the admission guard holds tripswitch's matchCondition to it.
var SamplePattern = "^" + regexp.QuoteMeta(SamplePrefix) + `\((\[[0-9a-f]+\])?(\|?[0-9a-f]\[[0-9a-f]+\])?\)` + regexp.QuoteMeta(SampleSuffix) + "$"

// sampleExpressions are every expression SampleExpression returns, built
// once: a record is checked against them on every read.
var sampleExpressions = func() map[string]bool {
	set := make(map[string]bool, 100)
	for p := int32(v1alpha1.MinHalfOpenSamplePercent); p <= v1alpha1.MaxHalfOpenSamplePercent; p++ {
		e, _, _ := SampleExpression(p)
		set[e] = true
	}
	return set
}()

// IsSampleExpression reports whether expr is one SampleExpression returns.
func IsSampleExpression(expr string) bool { return sampleExpressions[expr] }

// TrialPatch builds the single patch that starts a trial on an open Bypass
// circuit: its matchCondition samples instead of skipping, the webhook's
// failurePolicy is Ignore for the trial, and the record says both.
func TrialPatch(cfg *Configuration, rec v1alpha1.CircuitRecord, percent int32, now metav1.Time) ([]byte, v1alpha1.CircuitRecord, error) {
	s, j, err := trialState(cfg, rec)
	if err != nil {
		return nil, rec, err
	}
	if rec.Trial != nil {
		return nil, rec, fmt.Errorf("%w: webhook %q is already in a trial", ErrCannotTrial, rec.Webhook)
	}
	expr, applied, err := SampleExpression(percent)
	if err != nil {
		return nil, rec, err
	}
	rec.Trial = &v1alpha1.TrialRecord{StartedAt: now, Expression: expr, SamplePercent: applied, SetFailurePolicy: string(admissionregistrationv1.Ignore)}
	rec.NextTrialAt = nil
	ops := trialOps(cfg, s.Index, j, MatchConditionExpression, expr, rec.OriginalFailurePolicy, new(rec.Trial.SetFailurePolicy))
	return finishTrial(cfg, ops, rec)
}

// EndTrialPatch builds the single patch that ends a failed trial: the
// matchCondition skips the webhook again, its failurePolicy is what it was
// before the trial, and the record counts the failure and says when the
// next trial may start.
func EndTrialPatch(cfg *Configuration, rec v1alpha1.CircuitRecord, next metav1.Time) ([]byte, v1alpha1.CircuitRecord, error) {
	s, j, err := trialState(cfg, rec)
	if err != nil {
		return nil, rec, err
	}
	if rec.Trial == nil {
		return nil, rec, fmt.Errorf("%w: webhook %q has no trial to end", ErrCannotTrial, rec.Webhook)
	}
	ops := trialOps(cfg, s.Index, j, rec.Trial.Expression, MatchConditionExpression, new(rec.Trial.SetFailurePolicy), rec.OriginalFailurePolicy)
	rec.Trial = nil
	rec.FailedTrials++
	rec.NextTrialAt = &next
	return finishTrial(cfg, ops, rec)
}

// trialState checks that rec's Bypass change is intact on cfg and returns
// the webhook's state and its matchCondition's index.
func trialState(cfg *Configuration, rec v1alpha1.CircuitRecord) (State, int, error) {
	if !HasTrial(rec.Action) {
		return State{}, -1, fmt.Errorf("%w: webhook %q is open with %s, and only Bypass has a trial", ErrCannotTrial, rec.Webhook, rec.Action)
	}
	s := Inspect(cfg, rec.Webhook)
	if s.Index < 0 {
		return s, -1, fmt.Errorf("%w: %q", ErrWebhookNotFound, rec.Webhook)
	}
	s.Record = &rec
	if !s.Intact() {
		return s, -1, fmt.Errorf("%w: webhook %q: its Bypass change is no longer in place", ErrCannotTrial, rec.Webhook)
	}
	return s, conditionIndex(s.Webhook.MatchConditions, rec.MatchCondition), nil
}

// trialOps swap the matchCondition's expression and the failurePolicy, each
// tested first.
func trialOps(cfg *Configuration, i, j int, fromExpr, toExpr string, fromPolicy, toPolicy *string) []operation {
	expr := webhookPath(i, "matchConditions") + "/" + strconv.Itoa(j)
	policy := webhookPath(i, "failurePolicy")
	ops := []operation{
		{Op: "replace", Path: "/metadata/resourceVersion", Value: cfg.Object.GetResourceVersion()},
		{Op: "test", Path: webhookPath(i, "name"), Value: cfg.Webhooks[i].Name},
		{Op: "test", Path: expr + "/expression", Value: fromExpr},
		{Op: "replace", Path: expr + "/expression", Value: toExpr},
	}
	if fromPolicy != nil {
		ops = append(ops, operation{Op: "test", Path: policy, Value: *fromPolicy})
	}
	switch {
	case toPolicy != nil:
		ops = append(ops, operation{Op: "add", Path: policy, Value: *toPolicy})
	case fromPolicy != nil:
		ops = append(ops, operation{Op: "remove", Path: policy})
	}
	return ops
}

func finishTrial(cfg *Configuration, ops []operation, rec v1alpha1.CircuitRecord) ([]byte, v1alpha1.CircuitRecord, error) {
	value, err := encodeRecord(rec)
	if err != nil {
		return nil, rec, err
	}
	ops = append(ops, operation{Op: "replace", Path: "/metadata/annotations/" + pointer(AnnotationKey(rec.Webhook)), Value: value})
	data, err := json.Marshal(ops)
	return data, rec, err
}
