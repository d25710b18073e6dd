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

// outgoingPriority adds ctx's priority to its outgoing metadata, unless it
// is the default.
func outgoingPriority(ctx context.Context) context.Context {
	if p := policy.PriorityOf(ctx); p != policy.PriorityDefault {
		return metadata.AppendToOutgoingContext(ctx, PriorityKey, p.String())
	}
	return ctx
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

// withPriority returns ctx carrying the server call's priority.
func (s *Server) withPriority(ctx context.Context, method string) context.Context {
	if p, ok := s.incomingPriority(ctx, method); ok {
		return policy.WithPriority(ctx, p)
	}
	return ctx
}
