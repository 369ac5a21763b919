package controller_test

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestServiceEndpointsFromRealObjects resolves a service webhook to its ready
// endpoints from a Service and EndpointSlices stored by the real API server.
func TestServiceEndpointsFromRealObjects(t *testing.T) {
	b := newBed(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.cfg}}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.cfg, Name: "hook"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "metrics", Port: 8080, TargetPort: intstr.FromInt(8080)},
			{Name: "webhook", Port: 8443, TargetPort: intstr.FromInt(9443)},
		}},
	}
	slice := func(name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: b.cfg, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "hook"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   eps,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("metrics"), Port: ptr.To(int32(8080))}, {Name: ptr.To("webhook"), Port: ptr.To(int32(9443))}},
		}
	}
	ep := func(ip string, ready *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	other := slice("other-service", ep("10.9.9.9", nil))
	other.Labels[discoveryv1.LabelServiceName] = "other"
	for _, obj := range []client.Object{ns, svc,
		slice("hook-a", ep("10.1.0.2", ptr.To(true)), ep("10.1.0.3", ptr.To(false))),
		slice("hook-b", ep("10.1.0.1", nil)),
		other,
	} {
		if err := b.c.Create(b.ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	got, err := controller.ServiceEndpoints(b.ctx, b.c, &admissionregistrationv1.ServiceReference{Namespace: b.cfg, Name: "hook", Port: ptr.To(int32(8443))})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.1.0.1:9443", "10.1.0.2:9443"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("endpoints = %v, want %v (ready only, target port of the webhook's service port)", got, want)
	}
	if _, err := controller.ServiceEndpoints(b.ctx, b.c, &admissionregistrationv1.ServiceReference{Namespace: b.cfg, Name: "hook"}); err == nil {
		t.Fatal("resolved port 443, which the Service does not have")
	}
	if _, err := controller.ServiceEndpoints(b.ctx, b.c, &admissionregistrationv1.ServiceReference{Namespace: b.cfg, Name: "missing"}); err == nil {
		t.Fatal("resolved a Service that does not exist")
	}
}

// TestPartialOutageIsVisibleInStatus: in endpoint mode the breaker shows how
// many endpoints answered, and a partial outage does not open the circuit.
func TestPartialOutageIsVisibleInStatus(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Probe.Endpoints = true })
	b.health.mu.Lock()
	b.health.obs[wcb.Name] = probe.Observation{Verdict: probe.VerdictHealthy, ConsecutiveSuccesses: 5, Last: probe.Result{Status: probe.Healthy, Reason: "1/3 endpoints healthy (partial outage)", Healthy: 1, Total: 3}}
	b.health.mu.Unlock()
	b.settle(b.reconciler(b.c), wcb.Name)
	st := b.getBreaker(wcb.Name).Status
	if st.Probe.HealthyEndpoints == nil || *st.Probe.HealthyEndpoints != 1 || st.Probe.Endpoints == nil || *st.Probe.Endpoints != 3 || st.State != v1alpha1.StateClosed {
		t.Fatalf("status = %+v", st)
	}
	if hasRecord(b.getConfig()) {
		t.Fatal("a partial outage opened the circuit")
	}
}
