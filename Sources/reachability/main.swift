import ReachabilityCLI

await ReachabilityCommandLine.main()
