package redisstate

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ParseMessage gives the tests the breaker channel's parser.
var ParseMessage = parseMessage

// VersionErr gives the tests the version check on a version string.
var VersionErr = versionErr

// TripAfterFlush empties Redis (FLUSHALL) and reports a trip of s in one
// transaction, as s's worker would: a data loss that no replica's poll
// can see before the new open period.
func TripAfterFlush(ctx context.Context, s *SharedBreaker) error {
	_, err := s.conn.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.FlushAll(ctx)
		tripScript.Eval(ctx, p, s.keys, s.tripArgs()...)
		return nil
	})
	return err
}
