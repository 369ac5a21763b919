package circuit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/jsonpatch"
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
type operation = jsonpatch.Op

// pointer escapes a JSON Pointer reference token (RFC 6901).
func pointer(token string) string { return jsonpatch.Pointer(token) }

func webhookPath(i int, field string) string {
	return "/webhooks/" + strconv.Itoa(i) + "/" + field
}

// OpenPatch builds the single patch that opens webhook's circuit: it applies
// rec.Action and writes the record. rec supplies Breaker, BreakerUID, Action,
// OpenedAt and Reason; OpenPatch fills in what it changes and returns the
// completed record.
func OpenPatch(cfg *Configuration, webhook string, rec v1alpha1.CircuitRecord) ([]byte, v1alpha1.CircuitRecord, error) {
	rec.Webhook = webhook
	data, recs, err := OpenAllPatch(cfg, []v1alpha1.CircuitRecord{rec})
	if err != nil {
		return nil, rec, err
	}
	return data, recs[0], nil
}

// OpenAllPatch builds one patch that opens the circuits of several webhooks
// of one configuration, each exactly as OpenPatch would (rec.Webhook names
// each one's webhook), for breakers of one configuration that one outage
// trips together: one write instead of one per webhook. The patch is
// applied whole or not at all, so each record still goes on with its
// change. It returns the completed records in the order given.
func OpenAllPatch(cfg *Configuration, recs []v1alpha1.CircuitRecord) ([]byte, []v1alpha1.CircuitRecord, error) {
	if len(recs) == 0 {
		return nil, nil, errors.New("open: no circuit to open")
	}
	// The resourceVersion pins the patch to the object that was read (409
	// when stale); each webhook's name test pins its index (422 when the
	// list moved).
	ops := []operation{{Op: "replace", Path: "/metadata/resourceVersion", Value: cfg.Object.GetResourceVersion()}}
	out := make([]v1alpha1.CircuitRecord, len(recs))
	records := map[string]string{}
	for n, rec := range recs {
		if _, dup := records[AnnotationKey(rec.Webhook)]; dup {
			return nil, nil, fmt.Errorf("open: webhook %q named twice", rec.Webhook)
		}
		wops, full, err := openOps(cfg, rec)
		if err != nil {
			return nil, nil, err
		}
		value, err := encodeRecord(full)
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, wops...)
		records[AnnotationKey(rec.Webhook)] = value
		out[n] = full
	}
	if cfg.Object.GetAnnotations() == nil {
		// A JSON Patch add cannot create intermediate objects: create the
		// annotations map with every record at once.
		ops = append(ops, operation{Op: "add", Path: "/metadata/annotations", Value: records})
	} else {
		for _, rec := range out {
			key := AnnotationKey(rec.Webhook)
			ops = append(ops, operation{Op: "add", Path: "/metadata/annotations/" + pointer(key), Value: records[key]})
		}
	}
	data, err := json.Marshal(ops)
	return data, out, err
}

// openOps are the operations that open rec.Webhook's circuit, its name
// test first, and the completed record.
func openOps(cfg *Configuration, rec v1alpha1.CircuitRecord) ([]operation, v1alpha1.CircuitRecord, error) {
	i := cfg.Index(rec.Webhook)
	if i < 0 {
		return nil, rec, fmt.Errorf("%w: %q", ErrWebhookNotFound, rec.Webhook)
	}
	row := actionOf(rec.Action, false)
	if row == nil {
		return nil, rec, fmt.Errorf("openAction %q is not Ignore or Bypass", rec.Action)
	}
	w := cfg.Webhooks[i]
	if w.FailurePolicy != nil {
		rec.OriginalFailurePolicy = new(string(*w.FailurePolicy))
	}
	row.marks(&rec)
	ops, err := row.open(w, i, &rec)
	if err != nil {
		return nil, rec, err
	}
	return append([]operation{{Op: "test", Path: webhookPath(i, "name"), Value: w.Name}}, ops...), rec, nil
}

// ClosePatch builds the single patch that restores what rec says tripswitch
// changed and removes the record. It fails if the change is no longer intact:
// restoring over someone else's edit is never right (use DropPatch).
func ClosePatch(cfg *Configuration, webhook string, rec *v1alpha1.CircuitRecord) ([]byte, error) {
	if rec == nil {
		return nil, fmt.Errorf("close webhook %q: no record", webhook)
	}
	r := *rec
	r.Webhook = webhook
	return CloseAllPatch(cfg, []v1alpha1.CircuitRecord{r})
}

// CloseAllPatch builds one patch that closes the circuits of several
// webhooks of one configuration, each exactly as ClosePatch would (each
// record names its webhook), applied whole or not at all.
func CloseAllPatch(cfg *Configuration, recs []v1alpha1.CircuitRecord) ([]byte, error) {
	if len(recs) == 0 {
		return nil, errors.New("close: no circuit to close")
	}
	ops := []operation{{Op: "replace", Path: "/metadata/resourceVersion", Value: cfg.Object.GetResourceVersion()}}
	seen := map[string]bool{}
	for _, rec := range recs {
		if seen[rec.Webhook] {
			return nil, fmt.Errorf("close: webhook %q named twice", rec.Webhook)
		}
		seen[rec.Webhook] = true
		wops, err := closeOps(cfg, rec)
		if err != nil {
			return nil, err
		}
		ops = append(ops, wops...)
	}
	return json.Marshal(ops)
}

// closeOps are the operations that close rec.Webhook's circuit, its name
// test first and the record's removal last.
func closeOps(cfg *Configuration, rec v1alpha1.CircuitRecord) ([]operation, error) {
	webhook := rec.Webhook
	s := Inspect(cfg, webhook)
	if s.Index < 0 {
		return nil, fmt.Errorf("%w: %q", ErrWebhookNotFound, webhook)
	}
	s.Record = &rec
	if !s.Intact() {
		return nil, fmt.Errorf("close webhook %q: its %s change is no longer in place", webhook, rec.Action)
	}
	ops := []operation{{Op: "test", Path: webhookPath(s.Index, "name"), Value: cfg.Webhooks[s.Index].Name}}
	ops = append(ops, giveBack(s, rec)...)
	return append(ops, operation{Op: "remove", Path: "/metadata/annotations/" + pointer(AnnotationKey(webhook))}), nil
}

// restorePolicy gives webhook i's failurePolicy back (original; nil: it was
// unset), tested to be still set, as tripswitch set it.
func restorePolicy(i int, set string, original *string) []operation {
	path := webhookPath(i, "failurePolicy")
	ops := []operation{{Op: "test", Path: path, Value: set}}
	if original == nil {
		return append(ops, operation{Op: "remove", Path: path})
	}
	return append(ops, operation{Op: "replace", Path: path, Value: *original})
}

// removeCondition removes tripswitch's matchCondition from s's webhook,
// tested by name (and the matchConditions list, when tripswitch added it).
func removeCondition(s State, rec v1alpha1.CircuitRecord) []operation {
	i, conds := s.Index, s.Webhook.MatchConditions
	j := conditionIndex(conds, rec.MatchCondition)
	condPath := webhookPath(i, "matchConditions") + "/" + strconv.Itoa(j)
	ops := []operation{{Op: "test", Path: condPath + "/name", Value: rec.MatchCondition}}
	if rec.MatchConditionsWereUnset && len(conds) == 1 {
		return append(ops, operation{Op: "remove", Path: webhookPath(i, "matchConditions")})
	}
	return append(ops, operation{Op: "remove", Path: condPath})
}

// DropPatch builds the patch that removes webhook's record, for a record
// whose change someone else has undone or altered: what they changed stays
// theirs, and what is still as tripswitch set it is given back (the
// action table's changes that still hold: only a trial has two parts that
// can part ways).
func DropPatch(cfg *Configuration, webhook string) ([]byte, error) {
	key := AnnotationKey(webhook)
	if _, ok := cfg.Object.GetAnnotations()[key]; !ok {
		return nil, fmt.Errorf("drop record of webhook %q: annotation %s is not present", webhook, key)
	}
	ops := []operation{{Op: "replace", Path: "/metadata/resourceVersion", Value: cfg.Object.GetResourceVersion()}}
	if s := Inspect(cfg, webhook); s.Index >= 0 && s.Record != nil {
		if back := giveBack(s, *s.Record); len(back) > 0 {
			ops = append(ops, operation{Op: "test", Path: webhookPath(s.Index, "name"), Value: s.Webhook.Name})
			ops = append(ops, back...)
		}
	}
	return json.Marshal(append(ops, operation{Op: "remove", Path: "/metadata/annotations/" + pointer(key)}))
}
