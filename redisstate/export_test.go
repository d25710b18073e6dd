package redisstate

// ParseMessage gives the tests the breaker channel's parser.
var ParseMessage = parseMessage

// VersionErr gives the tests the version check on a version string.
var VersionErr = versionErr
