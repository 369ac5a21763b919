package circuit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// maxMatchConditions is the API server's limit per webhook.
const maxMatchConditions = 64

var (
	// ErrWebhookNotFound means the configuration has no webhook of that name.
	ErrWebhookNotFound = errors.New("webhook not found in configuration")
	// ErrCannotBypass means the Bypass action cannot be applied to this webhook.
	ErrCannotBypass = errors.New("cannot add the bypass matchCondition")
)

// operation is one RFC 6902 operation.
type operation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// MarshalJSON keeps "value" on every operation but remove, even when it is
// empty, so a test against "" is not silently turned into a malformed op.
func (o operation) MarshalJSON() ([]byte, error) {
	if o.Op == "remove" {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{o.Op, o.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{o.Op, o.Path, o.Value})
}

// pointer escapes a JSON Pointer reference token (RFC 6901).
func pointer(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

func webhookPath(i int, field string) string {
	return "/webhooks/" + strconv.Itoa(i) + "/" + field
}

// preconditions pin the patch to the object that was read: the
// resourceVersion (409 when stale) and the webhook's name at its index (422
// when the list moved).
func preconditions(cfg *Configuration, i int) []operation {
	return []operation{
		{Op: "replace", Path: "/metadata/resourceVersion", Value: cfg.Object.GetResourceVersion()},
		{Op: "test", Path: webhookPath(i, "name"), Value: cfg.Webhooks[i].Name},
	}
}

// OpenPatch builds the single patch that opens webhook's circuit: it applies
// rec.Action and writes the record. rec supplies Breaker, BreakerUID, Action,
// OpenedAt and Reason; OpenPatch fills in what it changes and returns the
// completed record.
func OpenPatch(cfg *Configuration, webhook string, rec v1alpha1.CircuitRecord) ([]byte, v1alpha1.CircuitRecord, error) {
	i := cfg.Index(webhook)
	if i < 0 {
		return nil, rec, fmt.Errorf("%w: %q", ErrWebhookNotFound, webhook)
	}
	w := cfg.Webhooks[i]
	rec.Webhook = webhook
	if w.FailurePolicy != nil {
		rec.OriginalFailurePolicy = new(string(*w.FailurePolicy))
	}
	ops := preconditions(cfg, i)
	switch rec.Action {
	case v1alpha1.OpenActionIgnore:
		rec.SetFailurePolicy = string(admissionregistrationv1.Ignore)
		if w.FailurePolicy != nil {
			ops = append(ops, operation{Op: "test", Path: webhookPath(i, "failurePolicy"), Value: string(*w.FailurePolicy)})
		}
		ops = append(ops, operation{Op: "add", Path: webhookPath(i, "failurePolicy"), Value: rec.SetFailurePolicy})
	case v1alpha1.OpenActionBypass:
		if conditionIndex(w.MatchConditions, MatchConditionName) >= 0 {
			return nil, rec, fmt.Errorf("%w: webhook %q already has a matchCondition named %s that tripswitch has no record of", ErrCannotBypass, webhook, MatchConditionName)
		}
		if len(w.MatchConditions) >= maxMatchConditions {
			return nil, rec, fmt.Errorf("%w: webhook %q already has the maximum of %d matchConditions", ErrCannotBypass, webhook, maxMatchConditions)
		}
		rec.MatchCondition = MatchConditionName
		cond := admissionregistrationv1.MatchCondition{Name: MatchConditionName, Expression: MatchConditionExpression}
		if len(w.MatchConditions) == 0 {
			rec.MatchConditionsWereUnset = true
			ops = append(ops, operation{Op: "add", Path: webhookPath(i, "matchConditions"), Value: []admissionregistrationv1.MatchCondition{cond}})
		} else {
			ops = append(ops, operation{Op: "add", Path: webhookPath(i, "matchConditions") + "/-", Value: cond})
		}
	default:
		return nil, rec, fmt.Errorf("openAction %q is not Ignore or Bypass", rec.Action)
	}
	value, err := encodeRecord(rec)
	if err != nil {
		return nil, rec, err
	}
	ops = append(ops, addAnnotation(cfg, AnnotationKey(webhook), value))
	data, err := json.Marshal(ops)
	return data, rec, err
}

// ClosePatch builds the single patch that restores what rec says tripswitch
// changed and removes the record. It fails if the change is no longer intact:
// restoring over someone else's edit is never right (use DropPatch).
func ClosePatch(cfg *Configuration, webhook string, rec *v1alpha1.CircuitRecord) ([]byte, error) {
	s := Inspect(cfg, webhook)
	if s.Index < 0 {
		return nil, fmt.Errorf("%w: %q", ErrWebhookNotFound, webhook)
	}
	s.Record = rec
	if !s.Intact() {
		return nil, fmt.Errorf("close webhook %q: its %s change is no longer in place", webhook, rec.Action)
	}
	i := s.Index
	ops := preconditions(cfg, i)
	switch rec.Action {
	case v1alpha1.OpenActionIgnore:
		path := webhookPath(i, "failurePolicy")
		ops = append(ops, operation{Op: "test", Path: path, Value: rec.SetFailurePolicy})
		if rec.OriginalFailurePolicy == nil {
			ops = append(ops, operation{Op: "remove", Path: path})
		} else {
			ops = append(ops, operation{Op: "replace", Path: path, Value: *rec.OriginalFailurePolicy})
		}
	case v1alpha1.OpenActionBypass:
		conds := s.Webhook.MatchConditions
		j := conditionIndex(conds, rec.MatchCondition)
		condPath := webhookPath(i, "matchConditions") + "/" + strconv.Itoa(j)
		ops = append(ops, operation{Op: "test", Path: condPath + "/name", Value: rec.MatchCondition})
		if rec.MatchConditionsWereUnset && len(conds) == 1 {
			ops = append(ops, operation{Op: "remove", Path: webhookPath(i, "matchConditions")})
		} else {
			ops = append(ops, operation{Op: "remove", Path: condPath})
		}
	}
	ops = append(ops, operation{Op: "remove", Path: "/metadata/annotations/" + pointer(AnnotationKey(webhook))})
	return json.Marshal(ops)
}

// DropPatch builds the patch that removes webhook's record and changes nothing
// else: for a record whose change someone else has already undone or altered.
func DropPatch(cfg *Configuration, webhook string) ([]byte, error) {
	key := AnnotationKey(webhook)
	if _, ok := cfg.Object.GetAnnotations()[key]; !ok {
		return nil, fmt.Errorf("drop record of webhook %q: annotation %s is not present", webhook, key)
	}
	return json.Marshal([]operation{
		{Op: "replace", Path: "/metadata/resourceVersion", Value: cfg.Object.GetResourceVersion()},
		{Op: "remove", Path: "/metadata/annotations/" + pointer(key)},
	})
}

// addAnnotation adds key, creating the annotations map when the object has
// none (a JSON Patch add cannot create intermediate objects).
func addAnnotation(cfg *Configuration, key, value string) operation {
	if cfg.Object.GetAnnotations() == nil {
		return operation{Op: "add", Path: "/metadata/annotations", Value: map[string]string{key: value}}
	}
	return operation{Op: "add", Path: "/metadata/annotations/" + pointer(key), Value: value}
}
