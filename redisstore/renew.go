package redisstore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// RenewRequest asks to extend a holder's claims.
type RenewRequest struct {
	// Session is the session id. Required.
	Session string
	// Holder is the claimant. Required.
	Holder string
	// Claims are the claims to renew: at most Config.MaxBatch.
	Claims []Attempt
	// TTL is the new lease from now, unless ExpiresAt is set; usually the
	// claim's own TTL (see ClaimRequest.TTL).
	TTL time.Duration
	// ExpiresAt, when set, is the absolute new expiry.
	ExpiresAt time.Time
}

// RenewResult says which claims were renewed and which were lost.
type RenewResult struct {
	// Renewed are the claims extended, sorted by index then consumer.
	Renewed []a2redis.HeadRef
	// Superseded are claims a newer attempt took, or whose head the
	// cursor moved past: stop working on them.
	Superseded []a2redis.HeadRef
	// Lapsed are the other claims: not held by this holder any more
	// though no newer attempt took them (the lease ran out, or the claim
	// was failed or released), or naming a head its cursor has not
	// reached. Stop working on them too: any claim may take them over.
	Lapsed []a2redis.HeadRef
}

// RenewClaims extends the holder's live claims. Every requested claim is
// reported in exactly one of Renewed, Superseded and Lapsed.
func (s *Store) RenewClaims(ctx context.Context, req RenewRequest) (RenewResult, error) {
	if err := checkSession(req.Session); err != nil {
		return RenewResult{}, err
	}
	if err := checkName("Holder", req.Holder); err != nil {
		return RenewResult{}, err
	}
	now := s.now()
	expires, err := check.Expiry(now, req.TTL, req.ExpiresAt)
	if err != nil {
		return RenewResult{}, err
	}
	if err := check.Count("Claims", "claims", len(req.Claims), s.cfg.MaxBatch, "Config.MaxBatch"); err != nil {
		return RenewResult{}, err
	}
	if len(req.Claims) == 0 {
		return RenewResult{Renewed: []a2redis.HeadRef{}, Superseded: []a2redis.HeadRef{}, Lapsed: []a2redis.HeadRef{}}, nil
	}
	args := []string{req.Holder, itoa(now), itoa(expires), itoa(int64(len(req.Claims)))}
	for i, c := range req.Claims {
		if err := checkCause(fmt.Sprintf("Claims[%d]", i), a2redis.Cause{Consumer: c.Head.Consumer, Lane: c.Head.Lane, Index: c.Head.Index, Attempt: c.Attempt}); err != nil {
			return RenewResult{}, err
		}
		if err := s.checkDeclared(ctx, fmt.Sprintf("Claims[%d].Consumer", i), c.Head.Consumer); err != nil {
			return RenewResult{}, err
		}
		args = append(args, c.Head.Consumer, tagOf(c.Head.Lane), itoa(c.Head.Index), itoa(c.Attempt))
	}
	reply, err := s.run(ctx, "renew", req.Session, args)
	if err != nil {
		return RenewResult{}, err
	}
	renewed, err := number(reply, 0)
	if err != nil || int(renewed)+1 > len(reply) {
		return RenewResult{}, fmt.Errorf("%w: renew replied %v", a2redis.ErrUnexpectedReply, reply)
	}
	r := RenewResult{Renewed: []a2redis.HeadRef{}, Superseded: []a2redis.HeadRef{}, Lapsed: []a2redis.HeadRef{}}
	reported := make([]bool, len(req.Claims))
	for i, m := range reply[1:] {
		pos, err := asInt(m)
		if err != nil || pos < 1 || int(pos) > len(req.Claims) {
			return RenewResult{}, fmt.Errorf("%w: renew replied position %v", a2redis.ErrUnexpectedReply, m)
		}
		ref := req.Claims[pos-1].Head
		reported[pos-1] = true
		if int64(i) < renewed {
			r.Renewed = append(r.Renewed, ref)
		} else {
			r.Superseded = append(r.Superseded, ref)
		}
	}
	for i, c := range req.Claims {
		if !reported[i] {
			r.Lapsed = append(r.Lapsed, c.Head)
		}
	}
	sortRefs(r.Renewed)
	sortRefs(r.Superseded)
	sortRefs(r.Lapsed)
	return r, nil
}

func sortRefs(refs []a2redis.HeadRef) {
	sort.SliceStable(refs, func(i, j int) bool {
		if refs[i].Index != refs[j].Index {
			return refs[i].Index < refs[j].Index
		}
		return refs[i].Consumer < refs[j].Consumer
	})
}
