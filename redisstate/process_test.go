package redisstate_test

const childEnv = "REDISSTATE_TEST_CHILD"

func runChild(role string) int { return 2 }
