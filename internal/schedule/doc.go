// Package schedule orders the controller's work when many breakers need it
// at once (a storm: every webhook failing together). Decisions that may
// open or close a circuit go before status reports (Queue's priorities,
// Decisions' count of what waits), a status write that loses nothing by
// waiting follows them (Decisions.Defer), and events go out a few at a
// time (EventRecorder) instead of competing with the patches.
package schedule
