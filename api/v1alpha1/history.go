package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The status's history of open windows: how the controller, a break-glass
// restore and the audit runner read and change it; nothing else does.

// MaxHistory bounds status.history (the CRD enforces the same).
const MaxHistory = 20

// Window is the window of the history that opened at openedAt, if any.
func (s *WebhookCircuitBreakerStatus) Window(openedAt metav1.Time) *OpenWindow {
	for i := range s.History {
		if s.History[i].OpenedAt.Equal(&openedAt) {
			return &s.History[i]
		}
	}
	return nil
}

// Unaudited is the oldest closed window without an audit, if any.
func (s *WebhookCircuitBreakerStatus) Unaudited() *OpenWindow {
	for i := range s.History {
		if w := &s.History[i]; w.ClosedAt != nil && w.Audit == nil {
			return w
		}
	}
	return nil
}

// CloseLast closes the last window at at, with reason, if it is still
// open, and reports whether it did.
func (s *WebhookCircuitBreakerStatus) CloseLast(at metav1.Time, reason string) bool {
	n := len(s.History)
	if n == 0 || s.History[n-1].ClosedAt != nil {
		return false
	}
	s.History[n-1].ClosedAt = &at
	s.History[n-1].CloseReason = reason
	return true
}

// OpenWindowFor appends the window rec opened, dropping the oldest beyond
// MaxHistory.
func (s *WebhookCircuitBreakerStatus) OpenWindowFor(rec *CircuitRecord) {
	s.History = append(s.History, OpenWindow{OpenedAt: rec.OpenedAt, Action: rec.Action, Reason: rec.Reason})
	if len(s.History) > MaxHistory {
		s.History = s.History[len(s.History)-MaxHistory:]
	}
}
