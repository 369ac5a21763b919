package circuit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

const (
	// AnnotationPrefix starts every recovery-record annotation key.
	AnnotationPrefix = "tripswitch.dev/circuit."
	// MatchConditionName names the matchCondition the Bypass action adds.
	MatchConditionName = "tripswitch.dev/circuit-open"
	// MatchConditionExpression is always false, so the API server skips the webhook.
	MatchConditionExpression = "false"

	// An annotation key's name part may be 63 characters long.
	maxKeyName = 63
)

// ErrCorruptRecord means a record annotation exists but cannot be trusted;
// tripswitch reports it and never guesses a restore from it.
var ErrCorruptRecord = errors.New("corrupt circuit record")

// AnnotationKey is the annotation that holds webhook's record. Webhook names
// may be longer than an annotation key allows; those are shortened with a
// hash, and the record names its webhook in full.
func AnnotationKey(webhook string) string {
	name := "circuit." + webhook
	if len(name) <= maxKeyName {
		return "tripswitch.dev/" + name
	}
	sum := sha256.Sum256([]byte(webhook))
	keep := maxKeyName - len("circuit.") - 1 - 16
	return "tripswitch.dev/circuit." + webhook[:keep] + "-" + hex.EncodeToString(sum[:8])
}

// ReadRecord returns webhook's record from annotations, nil if there is none,
// or an error wrapping ErrCorruptRecord if it is unreadable or inconsistent.
func ReadRecord(annotations map[string]string, webhook string) (*v1alpha1.CircuitRecord, error) {
	key := AnnotationKey(webhook)
	raw, ok := annotations[key]
	if !ok {
		return nil, nil
	}
	var rec v1alpha1.CircuitRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return nil, fmt.Errorf("%w: annotation %s is not JSON: %v", ErrCorruptRecord, key, err)
	}
	if err := validateRecord(&rec, webhook); err != nil {
		return nil, fmt.Errorf("%w: annotation %s: %v", ErrCorruptRecord, key, err)
	}
	return &rec, nil
}

func validateRecord(rec *v1alpha1.CircuitRecord, webhook string) error {
	switch {
	case rec.Webhook != webhook:
		return fmt.Errorf("webhook is %q, want %q", rec.Webhook, webhook)
	case rec.BreakerUID == "":
		return errors.New("breakerUID is empty")
	case actionOf(rec.Action, false) == nil:
		return fmt.Errorf("action %q is not Ignore or Bypass", rec.Action)
	}
	if err := actionOf(rec.Action, false).check(rec); err != nil {
		return err
	}
	if p := rec.OriginalFailurePolicy; p != nil && *p != "Fail" && *p != "Ignore" {
		return fmt.Errorf("originalFailurePolicy %q is not Fail or Ignore", *p)
	}
	if rec.Trial != nil {
		row := recordAction(rec)
		if row == nil {
			return fmt.Errorf("a trial on action %s (only Bypass has one)", rec.Action)
		}
		if err := row.check(rec); err != nil {
			return err
		}
	}
	if rec.FailedTrials < 0 {
		return fmt.Errorf("failedTrials %d is negative", rec.FailedTrials)
	}
	return nil
}

func encodeRecord(rec v1alpha1.CircuitRecord) (string, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return "", fmt.Errorf("encode circuit record: %w", err)
	}
	return string(data), nil
}
