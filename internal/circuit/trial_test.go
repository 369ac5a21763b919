package circuit

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// sampled is the share of keys the expression's regular expression selects
// (the CEL is checked on the real API server in test/e2e; here its match is
// evaluated by Go's RE2, the same syntax).
func sampled(t *testing.T, expr string, keys []string) float64 {
	t.Helper()
	m := regexp.MustCompile(`\.matches\('(.*)'\)$`).FindStringSubmatch(expr)
	if m == nil {
		t.Fatalf("no matches() in %s", expr)
	}
	re := regexp.MustCompile(m[1])
	n := 0
	for _, k := range keys {
		if re.MatchString(k) {
			n++
		}
	}
	return float64(n) / float64(len(keys))
}

func TestSampleExpressionSamplesWhatItSays(t *testing.T) {
	// The key is a random UUID, whose first two hex digits are uniform: a
	// sample of n/256 matches exactly n of the 256 two-digit prefixes.
	keys := make([]string, 0, 256)
	for i := range 256 {
		keys = append(keys, uuid.Must(uuid.FromBytes([]byte{byte(i), 1, 2, 3, 4, 5, 6, 0x47, 0x88, 9, 10, 11, 12, 13, 14, 15})).String())
	}
	re := regexp.MustCompile(SamplePattern)
	for p := int32(1); p <= 100; p++ {
		expr, applied, err := SampleExpression(p)
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(expr) || !IsSampleExpression(expr) {
			t.Fatalf("%d%%: %s is not a sample expression", p, expr)
		}
		want := float64((int(p)*256+99)/100) / 256
		if want < float64(p)/100 || want-float64(p)/100 >= 1.0/256 {
			t.Fatalf("%d%%: applied %v is not the next step of 1/256", p, want)
		}
		if got := sampled(t, expr, keys); got != want {
			t.Errorf("%d%% (%s): sampled %.4f of the two-digit prefixes, want %.4f", p, applied, got, want)
		}
	}
	for _, p := range []int32{0, -1, 101} {
		if _, _, err := SampleExpression(p); err == nil || !strings.Contains(err.Error(), "halfOpen.samplePercent") {
			t.Errorf("SampleExpression(%d) = %v, want an error naming halfOpen.samplePercent", p, err)
		}
	}
	for _, bad := range []string{"true", "false", SamplePrefix + ".*" + SampleSuffix, SamplePrefix + "(0[01])') || true || ('" + SampleSuffix} {
		if re.MatchString(bad) || IsSampleExpression(bad) {
			t.Errorf("%q passes as a sample expression", bad)
		}
	}
}

// TestGuardHoldsTheSampleExpression: the admission guard's rule spells
// SamplePattern in both policies, so the guard admits every trial tripswitch
// writes and nothing else of its form.
func TestGuardHoldsTheSampleExpression(t *testing.T) {
	data, err := os.ReadFile("../../config/admission-guard/guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	quoted := `c.expression.matches("` + strings.ReplaceAll(SamplePattern, `\`, `\\`) + `")`
	if n := strings.Count(string(data), quoted); n != 2 {
		t.Fatalf("guard.yaml spells the sample pattern %d times, want 2 (one per policy): %s", n, quoted)
	}
}

func TestTrialStartsEndsAndClosesInOneWriteEach(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*admissionregistrationv1.MutatingWebhook)
	}{
		{"failurePolicy Fail", nil},
		{"failurePolicy unset", func(w *admissionregistrationv1.MutatingWebhook) { w.FailurePolicy = nil }},
		{"other matchConditions", func(w *admissionregistrationv1.MutatingWebhook) {
			w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "only-prod", Expression: "true"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := testConfig(map[string]string{"team": "platform"}, tc.mutate)
			data, rec, err := OpenPatch(mustView(t, orig), target, openRecord(v1alpha1.OpenActionBypass))
			if err != nil {
				t.Fatal(err)
			}
			opened := applyPatch(t, orig, data)
			start := metav1.NewTime(time.Unix(1700000100, 0).UTC())
			data, trial, err := TrialPatch(mustView(t, opened), rec, 6, start)
			if err != nil {
				t.Fatal(err)
			}
			inTrial := applyPatch(t, opened, data)
			st := Inspect(mustView(t, inTrial), target)
			if st.RecordErr != nil || !equality.Semantic.DeepEqual(st.Record, &trial) || !st.Intact() || !st.InTrial() {
				t.Fatalf("trial record = %+v, %v (intact %v), want %+v", st.Record, st.RecordErr, st.Intact(), trial)
			}
			if fp := st.Webhook.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Ignore {
				t.Fatalf("failurePolicy in a trial = %v, want Ignore", fp)
			}
			j := conditionIndex(st.Webhook.MatchConditions, MatchConditionName)
			if st.Webhook.MatchConditions[j].Expression != trial.Trial.Expression || trial.Trial.SamplePercent != "6.25%" {
				t.Fatalf("trial condition = %+v, record %+v", st.Webhook.MatchConditions[j], trial.Trial)
			}
			if _, _, err := TrialPatch(mustView(t, inTrial), trial, 6, start); err == nil {
				t.Fatal("a second trial on a trial was allowed")
			}

			// A failed trial: back to the opened object but for the record,
			// which counts it and says when the next may start.
			next := metav1.NewTime(start.Add(time.Minute))
			data, ended, err := EndTrialPatch(mustView(t, inTrial), trial, next)
			if err != nil {
				t.Fatal(err)
			}
			back := applyPatch(t, inTrial, data)
			st = Inspect(mustView(t, back), target)
			if st.InTrial() || !st.Intact() || st.Record.FailedTrials != 1 || !st.Record.NextTrialAt.Equal(&next) || !equality.Semantic.DeepEqual(st.Record, &ended) {
				t.Fatalf("after a failed trial: %+v (intact %v)", st.Record, st.Intact())
			}
			if !equality.Semantic.DeepEqual(back.Webhooks, opened.Webhooks) {
				t.Fatalf("ending the trial left the webhook %+v, want %+v", back.Webhooks[1], opened.Webhooks[1])
			}

			// Closing from a second trial restores the original exactly.
			data, trial2, err := TrialPatch(mustView(t, back), ended, 6, next)
			if err != nil {
				t.Fatal(err)
			}
			again := applyPatch(t, back, data)
			if trial2.FailedTrials != 1 || trial2.NextTrialAt != nil {
				t.Fatalf("second trial record %+v", trial2)
			}
			data, err = ClosePatch(mustView(t, again), target, &trial2)
			if err != nil {
				t.Fatal(err)
			}
			if closed := applyPatch(t, again, data); !equality.Semantic.DeepEqual(closed, orig) {
				t.Errorf("close from a trial did not restore the original:\n got %+v\nwant %+v", closed, orig)
			}
		})
	}
}

func TestTrialRefusesWhatItDidNotSet(t *testing.T) {
	orig := testConfig(nil, nil)
	data, rec, err := OpenPatch(mustView(t, orig), target, openRecord(v1alpha1.OpenActionBypass))
	if err != nil {
		t.Fatal(err)
	}
	opened := applyPatch(t, orig, data)
	data, trial, err := TrialPatch(mustView(t, opened), rec, 50, metav1.Now())
	if err != nil {
		t.Fatal(err)
	}
	inTrial := applyPatch(t, opened, data)

	// An administrator set Fail during the trial: the change is theirs.
	edited := inTrial.DeepCopy()
	edited.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	if st := Inspect(mustView(t, edited), target); st.Intact() {
		t.Error("a trial whose failurePolicy an administrator changed is intact")
	}
	if _, _, err := EndTrialPatch(mustView(t, edited), trial, metav1.Now()); err == nil {
		t.Error("ending a trial over an administrator's failurePolicy was allowed")
	}
	if _, err := ClosePatch(mustView(t, edited), target, &trial); err == nil {
		t.Error("closing a trial over an administrator's failurePolicy was allowed")
	}
	// Dropping the record gives back what is still tripswitch's: its sampled
	// condition goes, their failurePolicy stays.
	data, err = DropPatch(mustView(t, edited), target)
	if err != nil {
		t.Fatal(err)
	}
	want := orig.DeepCopy()
	want.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	if got := applyPatch(t, edited, data); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("drop after an administrator's failurePolicy left\n%+v\nwant\n%+v", got.Webhooks[1], want.Webhooks[1])
	}
	// One who rewrote the condition keeps it; the trial's Ignore goes.
	rewritten := inTrial.DeepCopy()
	j := conditionIndex(rewritten.Webhooks[1].MatchConditions, MatchConditionName)
	rewritten.Webhooks[1].MatchConditions[j].Expression = "true"
	data, err = DropPatch(mustView(t, rewritten), target)
	if err != nil {
		t.Fatal(err)
	}
	got := applyPatch(t, rewritten, data)
	if fp := got.Webhooks[1].FailurePolicy; !equality.Semantic.DeepEqual(fp, orig.Webhooks[1].FailurePolicy) {
		t.Errorf("drop after a rewritten condition left failurePolicy %v, want the original %v", fp, orig.Webhooks[1].FailurePolicy)
	}
	if c := got.Webhooks[1].MatchConditions; len(c) != 1 || c[0].Expression != "true" {
		t.Errorf("drop after a rewritten condition left matchConditions %+v, want theirs", c)
	}
	if _, ok := got.Annotations[AnnotationKey(target)]; ok {
		t.Error("drop left the record")
	}
	// An Ignore circuit has no trial.
	data, ign, err := OpenPatch(mustView(t, orig), target, openRecord(v1alpha1.OpenActionIgnore))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := TrialPatch(mustView(t, applyPatch(t, orig, data)), ign, 6, metav1.Now()); err == nil {
		t.Error("a trial on an Ignore circuit was allowed")
	}
	// A record whose trial names an expression tripswitch does not write is corrupt.
	bad := trial
	bad.Trial = &v1alpha1.TrialRecord{Expression: "true", SetFailurePolicy: "Ignore", StartedAt: metav1.Now()}
	value, _ := encodeRecord(bad)
	if _, err := ReadRecord(map[string]string{AnnotationKey(target): value}, target); err == nil {
		t.Error("a record with a foreign trial expression was read as valid")
	}
}
