package grpcpolicy

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/watertight/watertight/policy"
)

// PriorityKey is the metadata key in which a [Client] with
// ClientConfig.PropagatePriority sends its call's priority
// ("sheddable" or "critical"), and from which a [Server] reads it when
// ServerConfig.TrustPriority allows.
const PriorityKey = "watertight-priority"

// outgoingPriority sets ctx's priority in its outgoing metadata, in place
// of any there, or removes it if the priority is the default.
func outgoingPriority(ctx context.Context) context.Context {
	p := policy.PriorityOf(ctx)
	md, _ := metadata.FromOutgoingContext(ctx)
	if p == policy.PriorityDefault && len(md[PriorityKey]) == 0 {
		return ctx
	}
	md = md.Copy()
	if p == policy.PriorityDefault {
		delete(md, PriorityKey)
	} else {
		md.Set(PriorityKey, p.String())
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// incomingPriority returns the priority of a server call: the client's, if
// it is trusted and sent a known one, else the server's own choice, else
// the default. It reports false if neither gives one.
func (s *Server) incomingPriority(ctx context.Context, method string) (policy.Priority, bool) {
	if s.trust != nil && s.trust(ctx, method) {
		if v := metadata.ValueFromIncomingContext(ctx, PriorityKey); len(v) == 1 {
			if p, err := policy.ParsePriority(v[0]); err == nil {
				return p, true
			}
		}
	}
	if s.priority != nil {
		p := s.priority(ctx, method)
		if p < policy.PrioritySheddable || p > policy.PriorityCritical {
			p = policy.PriorityDefault
		}
		return p, true
	}
	return policy.PriorityDefault, false
}

// withPriority returns ctx carrying the server call's priority, and its
// key if ServerConfig.Key gives one.
func (s *Server) withPriority(ctx context.Context, method string) context.Context {
	if p, ok := s.incomingPriority(ctx, method); ok {
		ctx = policy.WithPriority(ctx, p)
	}
	if s.key != nil {
		if k := s.key(ctx, method); k != "" {
			ctx = policy.WithKey(ctx, k)
		}
	}
	return ctx
}
