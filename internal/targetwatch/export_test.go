package targetwatch

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// SetWatchTimeout makes every watch request ask for d to 2d.
func (t *Targets) SetWatchTimeout(d time.Duration) { t.watchTimeout = d }

// FollowFrom follows one configuration from resourceVersion rv, as a watch
// resumed at it would, until ctx ends; see returns what it saw so far
// (found false: not yet, or it does not exist).
func (t *Targets) FollowFrom(ctx context.Context, kind v1alpha1.TargetKind, name, rv string) (see func() (client.Object, bool)) {
	v := &view{}
	go t.follow(ctx, targetKey{kind, name}, v, rv)
	return func() (client.Object, bool) {
		s := v.seen.Load()
		if !s.exists() {
			return nil, false
		}
		return s.obj, true
	}
}
