package appliance

func checkPlatform() error { return nil }
