package main

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// A controller installed into a namespace of any name learns its own
// ServiceAccount from the API server, from the token it runs with.
func TestUsernameIsTheServiceAccountOfAnyNamespace(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns, sa = "platform-guards", "tripswitch-controller"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tok.Status.Token
	got, err := username(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + ns + ":" + sa; got != want {
		t.Fatalf("username %q, want %q", got, want)
	}
}
