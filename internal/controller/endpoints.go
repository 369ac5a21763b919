package controller

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// serviceEndpoints returns the ready endpoints ("ip:port") behind a
// service webhook, which the probes call one by one in endpoint mode: on
// the Service port the API server would call (443 unless set), translated
// to each EndpointSlice's port of the same name.
func serviceEndpoints(ctx context.Context, r client.Reader, ref *admissionregistrationv1.ServiceReference) ([]string, error) {
	var svc corev1.Service
	if err := r.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &svc); err != nil {
		return nil, fmt.Errorf("get Service %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	port := int32(443)
	if ref.Port != nil {
		port = *ref.Port
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == port })
	if i < 0 {
		return nil, fmt.Errorf("service %s/%s has no port %d", ref.Namespace, ref.Name, port)
	}
	portName := svc.Spec.Ports[i].Name
	var list discoveryv1.EndpointSliceList
	if err := r.List(ctx, &list, client.InNamespace(ref.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: ref.Name}); err != nil {
		return nil, fmt.Errorf("list EndpointSlices of Service %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	var out []string
	for _, es := range list.Items {
		j := slices.IndexFunc(es.Ports, func(p discoveryv1.EndpointPort) bool { return ptr.Deref(p.Name, "") == portName && p.Port != nil })
		if j < 0 {
			continue
		}
		target := strconv.Itoa(int(*es.Ports[j].Port))
		for _, ep := range es.Endpoints {
			// Ready unset means ready, as for kube-proxy.
			if (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) || len(ep.Addresses) == 0 {
				continue
			}
			out = append(out, net.JoinHostPort(ep.Addresses[0], target))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
