package circuit

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Held is an open of tripswitch's that it made and has not closed, as it
// knows it: the open of the breaker's outage window, counted in its status
// before it was sent, with the record its status mirrors when it does.
type Held struct {
	// Record is the open's record when the status mirrors it (it says what
	// a trial changed too); else the open is known by Action and OpenedAt.
	Record   *v1alpha1.CircuitRecord
	Action   v1alpha1.OpenAction
	OpenedAt metav1.Time
	// UID is the configuration the open was written to.
	UID types.UID
}

// record is h's record, or one made from what h says of the open.
func (h *Held) record(webhook string) *v1alpha1.CircuitRecord {
	if h.Record != nil {
		return h.Record
	}
	rec := &v1alpha1.CircuitRecord{Webhook: webhook, Action: h.Action, OpenedAt: h.OpenedAt}
	if row := actionOf(h.Action, false); row != nil {
		row.marks(rec)
	}
	return rec
}

// Shape is how an open was undone.
type Shape string

// Shapes of an undo.
const (
	// ShapeValueChanged: the record is there, its change is not (the
	// failurePolicy put back, tripswitch's matchCondition removed or
	// rewritten, a trial's sample or its Ignore taken away).
	ShapeValueChanged Shape = "ValueChanged"
	// ShapeRecordRemoved: the change is there, its record is not: tripswitch
	// no longer owns the value and leaves it.
	ShapeRecordRemoved Shape = "RecordRemoved"
	// ShapeWrittenOver: the change and the record are both gone from the
	// same configuration: it was written over whole (an Update from a
	// template).
	ShapeWrittenOver Shape = "WrittenOver"
	// ShapeRecreated: the configuration was deleted and created again (a
	// new UID) while the open was held.
	ShapeRecreated Shape = "Recreated"
)

// Undo is the verdict of Undone.
type Undo struct {
	Shape Shape
	// Record is the undone open's record (as it was written, or as the
	// window knows the open when the record went with the configuration).
	Record *v1alpha1.CircuitRecord
	// Gone says what of the open is no longer on the webhook.
	Gone string
	// Fields are the fields of the webhook entry that were put back.
	Fields Field
	// RecordKept: the record annotation is still there (only a drop of it
	// is left to write).
	RecordKept bool
}

// Undone is the one rule for "someone undid tripswitch's open", whatever
// its shape: s is the breaker's webhook as the configuration of UID uid
// ("" when it is missing) has it, with s.Record the breaker's own record,
// if any; held is the open tripswitch holds as far as it wrote (nil when
// none). It reports an undo
// when the record is there and its change is not, or when an open
// tripswitch holds has left the configuration without tripswitch closing
// it: its record gone with the change kept, both gone, or the whole
// configuration deleted and created again. A configuration that is gone,
// or no longer has the webhook, undoes nothing: no request is sent to the
// webhook, and one created again is judged when it is there.
func Undone(held *Held, uid types.UID, s State) (Undo, bool) {
	if rec := s.Record; rec != nil {
		if s.Index < 0 {
			return Undo{}, false
		}
		gone, fields := undoneChanges(rec, s.Webhook)
		if len(gone) == 0 {
			return Undo{}, false
		}
		return Undo{Shape: ShapeValueChanged, Record: rec, Gone: strings.Join(gone, ", "), Fields: fields, RecordKept: true}, true
	}
	if held == nil || uid == "" || s.Index < 0 {
		return Undo{}, false
	}
	rec := held.record(s.Webhook.Name)
	if held.UID != "" && uid != held.UID {
		_, fields := undoneChanges(rec, s.Webhook)
		return Undo{Shape: ShapeRecreated, Record: rec, Fields: fields,
			Gone: fmt.Sprintf("the configuration was deleted and created again (uid %s, was %s), without the record", uid, held.UID)}, true
	}
	if s.FailsOpenWithoutRecord(rec.Action) {
		return Undo{Shape: ShapeRecordRemoved, Record: rec, Gone: "the record annotation is gone, the change left in place"}, true
	}
	gone, fields := undoneChanges(rec, s.Webhook)
	return Undo{Shape: ShapeWrittenOver, Record: rec, Fields: fields, Gone: strings.Join(append(gone, "the record annotation is gone"), ", ")}, true
}
