package slots

import (
	"testing"
	"time"
)

// An agent renews its held slot three times per slots.heartbeatBound, so
// that the coordinator sees it alive twice more before the bound even when
// one renewal is lost.
func TestNewRequesterTimings(t *testing.T) {
	r := NewRequester(nil, "node-1", 90*time.Second, nil, nil)
	if r.RenewInterval != 30*time.Second || r.NoAnswerAfter != DefaultNoAnswerAfter || r.ClaimGrace != DefaultClaimGrace || r.NodeName != "node-1" {
		t.Errorf("requester %+v", r)
	}
	if r.RenewInterval*renewsPerHeartbeatBound > 90*time.Second {
		t.Errorf("renews every %s: fewer than %d renewals fit in the bound", r.RenewInterval, renewsPerHeartbeatBound)
	}
}
