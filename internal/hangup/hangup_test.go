package hangup

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestClientGone_OnlyTheRequestsOwnCancellationIsAHangUp(t *testing.T) {
	t.Parallel()
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"cancelled request, cancelled error", cancelled, context.Canceled, true},
		{"cancelled request, wrapped cancelled error", cancelled, fmt.Errorf("read policy: %w", context.Canceled), true},
		{"live request, cancelled error from elsewhere", live, context.Canceled, false},
		{"cancelled request, another error", cancelled, errors.New("disk full"), false},
		{"request past its deadline", expired, context.DeadlineExceeded, false},
		{"request past its deadline, cancelled error", expired, context.Canceled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClientGone(tc.ctx, tc.err); got != tc.want {
				t.Errorf("ClientGone = %v, want %v", got, tc.want)
			}
		})
	}
}
