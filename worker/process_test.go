package worker_test

const envTestWorker = "A2REDIS_TESTWORKER"

func testWorkerMain() int { return 0 }
