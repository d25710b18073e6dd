// Package telemetry holds the OpenTelemetry plumbing the policies share:
// names, attribute keys, prepared records and error classification.
package telemetry
