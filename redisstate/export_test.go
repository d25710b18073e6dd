package redisstate

// ParseMessage gives the tests the breaker channel's parser.
var ParseMessage = parseMessage
