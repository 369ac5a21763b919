// Package admission builds the dry-run AdmissionReview tripswitch sends to a
// webhook (a probe, or an audit's re-review), sends a re-review within the
// webhook's timeout through the Poster it is given (Send), and reads the
// answer, the way the API server does: the version the webhook accepts, a
// fresh UID, the requester, and an answer that is only an answer when it is
// a review response for that UID.
package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Version is the AdmissionReview version to send a webhook that lists
// versions in admissionReviewVersions: v1 when listed (or nothing is
// listed), else v1beta1, the API server's own preference. The two share one
// wire shape.
func Version(versions []string) (string, error) {
	if len(versions) == 0 || slices.Contains(versions, "v1") {
		return "v1", nil
	}
	if slices.Contains(versions, "v1beta1") {
		return "v1beta1", nil
	}
	return "", fmt.Errorf("admissionReviewVersions %v include neither v1 nor v1beta1", versions)
}

// Review is one dry-run AdmissionReview request.
type Review struct {
	// Versions is the webhook's admissionReviewVersions.
	Versions []string
	// UIDPrefix starts the request's UID, which is otherwise random: it says
	// in the webhook's logs who sent it ("tripswitch-probe-").
	UIDPrefix string
	// Kind and Resource of the object; they are also the request's
	// RequestKind and RequestResource.
	Kind     metav1.GroupVersionKind
	Resource metav1.GroupVersionResource
	// Name and Namespace of the object.
	Name, Namespace string
	// Operation is CREATE or UPDATE. For an UPDATE the object is also the
	// old object.
	Operation admissionv1.Operation
	// User is the requester named in userInfo; empty names none.
	User string
	// Object is the object's JSON.
	Object []byte
}

// Encode returns the review's JSON and the UID its answer must carry. The
// request always has dryRun set and the dry-run options the API server
// would pass, so a webhook that honours them makes no change.
func (r Review) Encode() ([]byte, types.UID, error) {
	version, err := Version(r.Versions)
	if err != nil {
		return nil, "", err
	}
	if r.Operation != admissionv1.Create && r.Operation != admissionv1.Update {
		return nil, "", fmt.Errorf("operation %q: a dry-run review is a CREATE or an UPDATE", r.Operation)
	}
	uid := types.UID(r.UIDPrefix + string(uuid.NewUUID()))
	req := &admissionv1.AdmissionRequest{
		UID:             uid,
		Kind:            r.Kind,
		Resource:        r.Resource,
		RequestKind:     &r.Kind,
		RequestResource: &r.Resource,
		Name:            r.Name,
		Namespace:       r.Namespace,
		Operation:       r.Operation,
		UserInfo:        authenticationv1.UserInfo{Username: r.User},
		Object:          runtime.RawExtension{Raw: r.Object},
		DryRun:          new(true),
		Options:         runtime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All"]}`)},
	}
	if r.Operation == admissionv1.Update {
		req.OldObject = runtime.RawExtension{Raw: r.Object}
		req.Options = runtime.RawExtension{Raw: []byte(`{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All"]}`)}
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/" + version, Kind: "AdmissionReview"},
		Request:  req,
	}
	data, err := json.Marshal(review)
	if err != nil {
		return nil, "", fmt.Errorf("encode the AdmissionReview: %w", err)
	}
	return data, uid, nil
}

// ErrNotAReview is returned by Decode for an answer that is not an
// AdmissionReview with a response.
var ErrNotAReview = errors.New("the answer is not an AdmissionReview with a response")

// ErrWrongUID is returned by Decode for a response to another request.
var ErrWrongUID = errors.New("the answer's UID does not match the request")

// Decode reads a webhook's answer to the review with the given UID. The API
// server rejects anything else, so tripswitch does too.
func Decode(body []byte, uid types.UID) (*admissionv1.AdmissionResponse, error) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Response == nil {
		return nil, ErrNotAReview
	}
	if review.Response.UID != uid {
		return nil, fmt.Errorf("%w: it answers %q, not %q", ErrWrongUID, review.Response.UID, uid)
	}
	return review.Response, nil
}
