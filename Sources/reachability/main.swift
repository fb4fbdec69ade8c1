import ReachabilityCLI

ReachabilityCommandLine.main()
