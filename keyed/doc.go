// Package keyed runs each call through the policy of its key: a tenant,
// an API key, a host, a model. A [Group] builds a key's policy from
// Config.New on the key's first call and keeps at most Config.MaxKeys of
// them live, so that one tenant's flood, or one host's failures, stay in
// that key's policy while the others run on.
//
// A Group is a [policy.Policy]: put it in any slot of a compose pipeline
// (a breaker per host, with the rest of the pipeline shared), or wrap
// whole pipelines, one per tenant.
//
// # Keys
//
// A call's key is Config.Key(ctx), by default [policy.KeyOf]: the key
// [policy.WithKey] put in ctx. Take it from what the caller proved (an
// authenticated tenant), not from a header it sends, unless the peer is
// trusted. A call gets no policy of its own, and runs through Config.Rest
// (or is rejected if Rest is nil), when:
//
//	its key is empty                          reason "no_key"
//	its key is longer than MaxKeyLen          reason "key_too_long"
//	MaxKeys keys are live and none may go     reason "keys_full"
//
// Each rejection matches [ErrNoPolicy] and policy.ErrRejected, is counted
// in watertight.rejections (kind "keyed") and adds a watertight.rejected
// event to the span in ctx. If Config.New fails, the call returns its
// error, wrapped, and the next call of that key asks New again.
//
// # Bounds
//
// At most MaxKeys policies are live. A key whose calls have all ended
// waits in least recently used order; a new key evicts the least recently
// used one once that one has been idle for Config.MinIdle. A key is never
// evicted while a call holds it. So an attacker who invents keys gets
// MaxKeys policies at most, and none of a tenant active within MinIdle.
// An evicted policy that has a Close method is closed, just after its key
// leaves the Group; its key's next call builds a new one. New runs
// outside the Group's lock, so calls of new keys may build policies at
// once; one whose key then finds no room is closed at once and serves no
// call.
//
// # Metric labels
//
// A key can name its policy in telemetry only if the user allows it: New
// is given the key and a label, the key itself if it is in Config.Labels,
// else "other". Name the policy by the label, and telemetry stays within
// len(Labels)+1 values whatever the keys.
//
// A Group is safe for concurrent use. Its hit path (a live key) takes one
// mutex twice and allocates nothing.
package keyed
