// Package telemetry holds the OpenTelemetry plumbing the watertight policies
// share: instrument names, attribute keys, rejection and timeout records
// prepared once per policy, and error classification. It is internal: users
// configure telemetry through each policy's Config and compose's options.
package telemetry
