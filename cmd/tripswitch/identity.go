package main

import (
	"context"
	"errors"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// username returns the user the API server authenticates cfg as, from a
// SelfSubjectReview (authentication.k8s.io/v1, which every authenticated
// user may create), so that the reviews tripswitch sends on its own behalf
// name the user it really runs as: the ServiceAccount of whatever
// namespace it was installed into, or the operator running the CLI.
func username(ctx context.Context, cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("identity client: %w", err)
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("ask the API server who this client is (SelfSubjectReview): %w", err)
	}
	if r.Status.UserInfo.Username == "" {
		return "", errors.New("the API server's SelfSubjectReview named no user")
	}
	return r.Status.UserInfo.Username, nil
}
