package admission

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestVersionPrefersV1(t *testing.T) {
	cases := []struct {
		in      []string
		want    string
		wantErr bool
	}{
		{nil, "v1", false},
		{[]string{"v1beta1", "v1"}, "v1", false},
		{[]string{"v1beta1"}, "v1beta1", false},
		{[]string{"v2"}, "", true},
	}
	for _, c := range cases {
		got, err := Version(c.in)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("Version(%v) = %q, %v; want %q, error %v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

func TestEncodeIsADryRunTheWebhookCanAnswer(t *testing.T) {
	obj := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"ns"}}`)
	for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update} {
		r := Review{
			Versions: []string{"v1beta1"}, UIDPrefix: "tripswitch-test-",
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			Name:     "x", Namespace: "ns", Operation: op, User: "system:serviceaccount:ts:tripswitch", Object: obj,
		}
		body, uid, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		var got admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		req := got.Request
		if got.APIVersion != "admission.k8s.io/v1beta1" || req == nil || req.UID != uid || !strings.HasPrefix(string(uid), "tripswitch-test-") {
			t.Fatalf("%s: review %s, uid %q", op, body, uid)
		}
		if req.DryRun == nil || !*req.DryRun || !strings.Contains(string(req.Options.Raw), `"dryRun":["All"]`) {
			t.Errorf("%s: not a dry run: %s", op, body)
		}
		if req.UserInfo.Username != r.User || req.Operation != op || req.RequestKind == nil || *req.RequestKind != r.Kind || req.Name != "x" {
			t.Errorf("%s: request %+v", op, req)
		}
		if (op == admissionv1.Update) != (len(req.OldObject.Raw) > 0) {
			t.Errorf("%s: old object %s", op, req.OldObject.Raw)
		}
		// A webhook's answer for this UID is read back; one for another is not.
		answer, _ := json.Marshal(admissionv1.AdmissionReview{Response: &admissionv1.AdmissionResponse{UID: uid, Allowed: true}})
		if resp, err := Decode(answer, uid); err != nil || !resp.Allowed {
			t.Errorf("%s: Decode of the right answer: %v", op, err)
		}
		if _, err := Decode(answer, uid+"x"); !errors.Is(err, ErrWrongUID) {
			t.Errorf("%s: Decode of another request's answer: %v", op, err)
		}
	}
	if _, _, err := (Review{Operation: admissionv1.Delete}).Encode(); err == nil {
		t.Error("a DELETE review was encoded")
	}
	if _, _, err := (Review{Versions: []string{"v2"}, Operation: admissionv1.Create}).Encode(); err == nil {
		t.Error("a review in an unknown version was encoded")
	}
}

func TestDecodeRefusesWhatIsNotAReviewResponse(t *testing.T) {
	for _, body := range []string{``, `<html>`, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, `{"request":{"uid":"u"}}`} {
		if _, err := Decode([]byte(body), "u"); !errors.Is(err, ErrNotAReview) {
			t.Errorf("Decode(%q) = %v, want ErrNotAReview", body, err)
		}
	}
}
