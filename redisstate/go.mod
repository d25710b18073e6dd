module github.com/watertight/watertight/redisstate

go 1.26.0

replace github.com/watertight/watertight => ../

require go.uber.org/goleak v1.3.0

require github.com/stretchr/testify v1.12.1 // indirect
