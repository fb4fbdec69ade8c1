// swift-tools-version:6.0
import PackageDescription
#if canImport(Glibc)
import Glibc
#endif

/// Packed relative relocations (DT_RELR) need glibc >= 2.36 where the binary runs; the manifest
/// runs on the machine that builds, so it asks that machine's glibc.
let linkerPacksRelativeRelocations: Bool = {
    #if canImport(Glibc)
    var text = [CChar](repeating: 0, count: 64)   // "glibc 2.36"
    guard confstr(Int32(_CS_GNU_LIBC_VERSION), &text, text.count) > 0 else { return false }
    let bytes = text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
    let version = String(decoding: bytes, as: UTF8.self).split(separator: " ").last?
        .split(separator: ".").compactMap { Int($0) } ?? []
    return version.count >= 2 && (version[0], version[1]) >= (2, 36)
    #else
    return false
    #endif
}()

/// Whether the C++ runtime can be linked statically: the toolchain's GCC directory holds
/// libstdc++.a (libstdc++-N-dev ships it beside the libstdc++.so every Swift link needs).
let staticLibstdcxxAvailable: Bool = {
    #if canImport(Glibc)
    var found = glob_t()
    defer { globfree(&found) }
    return glob("/usr/lib/gcc/*/*/libstdc++.a", 0, nil, &found) == 0 && found.gl_pathc > 0
    #else
    return false
    #endif
}()

/// Release links of the executable. Packed relative relocations need GNU ld (see above). The
/// static Swift runtime needs the C++ runtime, and the toolchain's static-stdlib link names it
/// with `-lstdc++` before any flag a package can add; Sources/reachability/linker holds a
/// linker script named libstdc++.so that GNU ld finds first for that name and that reads
/// libstdc++.a instead. The binary then takes the few C++ runtime functions the Swift runtime
/// calls and no longer loads libstdc++.so.6, whose relocation and symbol tables cost every
/// command about 0.9 MiB of resident memory. Unused when the Swift runtime is linked
/// dynamically (its libswiftCore.so brings libstdc++.so.6 itself).
///
/// With GNU ld, Sources/reachability/linker/hot-text.ld (written by bench/hot_text.py) also
/// gathers the C/C++ runtime functions the commands run into one place: the archives lay them out
/// among megabytes of code the commands never run, and the kernel maps code in 64 KiB windows
/// around each page touched. About 1.4 MiB less resident memory for `download`.
let linkerDirectory = Context.packageDirectory + "/Sources/reachability/linker"
let releaseLinkerFlags: [String] =
    (linkerPacksRelativeRelocations
        ? ["-use-ld=bfd", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
           "-Xlinker", "-T", "-Xlinker", linkerDirectory + "/hot-text.ld"]
        : [])
    + (staticLibstdcxxAvailable ? ["-L", linkerDirectory] : [])

// Linux only: the package is built on rtnetlink, libnl, Linux's file-system calls (renameat2,
// sync_file_range, O_PATH), namespaces and sysfs, so it claims no other platform.
let package = Package(
    name: "reachability",
    products: [
        .library(name: "LinuxReachability", targets: ["LinuxReachability"]),
        .library(name: "ResumableDownloads", targets: ["ResumableDownloads"]),
        .executable(name: "reachability", targets: ["reachability"]),
        // URLSession's download API over the resume engine (issue 12); its own product.
        .library(name: "ResumableURLSession", targets: ["ResumableURLSession"]),
        // The agent's typed client (and the agent itself), for programs that queue downloads in it.
        .library(name: "ReachabilityAgent", targets: ["ReachabilityAgent"]),
    ],
    targets: [
        // The only target that touches netlink: libnl-3 / libnl-route-3 plus a shim header.
        .systemLibrary(
            name: "CNetlink",
            pkgConfig: "libnl-route-3.0",
            providers: [.apt(["libnl-3-dev", "libnl-route-3-dev"])]
        ),
        // libcurl with a shim for the variadic setopt/getinfo calls. Loaded with dlopen on first
        // use, not linked (no pkgConfig: its `-lcurl` would link it), so commands that never
        // download do not map libcurl's thirty dependent libraries.
        .systemLibrary(
            name: "CCurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // OpenSSL's libcrypto: the project's one SHA-256 (ResumableDownloads/Storage/SHA256.swift);
        // loaded on first use like libcurl.
        .systemLibrary(
            name: "CCrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // libsystemd's sd-bus: NetworkManager's and ModemManager's facts over the D-Bus system bus
        // (LinuxReachability/SystemBus). Loaded with dlopen only when a system bus exists, like
        // libcurl: no pkgConfig, so `-lsystemd` is not linked and a machine without a bus maps
        // none of libsystemd's five dependent libraries.
        .systemLibrary(
            name: "CSystemdBus",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // Linux file-system calls Glibc's module lacks (renameat2) and variadic ones, as typed helpers.
        .systemLibrary(name: "CLinuxSystem"),
        // The one home for file-system system calls: typed descriptors and errno, checked
        // directories, O_NOFOLLOW/O_EXCL opens (package-internal API).
        .target(name: "LinuxSystem", dependencies: ["CLinuxSystem"]),
        // What every module needs and none owns: the logger, threads and signal handlers, time
        // (timestamps, Duration arithmetic that cannot trap, the token bucket), and values
        // parsed from text with their bounds (seconds, bytes, counts). LinuxReachability
        // re-exports it, so `import LinuxReachability` still brings `Logger`.
        .target(name: "ReachabilityBase", dependencies: ["LinuxSystem"],
                swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]),
        // MemberImportVisibility (SE-0444): a file sees only the extension members of modules it
        // imports itself, so a file importing FoundationEssentials cannot reach Foundation proper
        // (and link ICU into the CLI) through another file's `import Foundation`.
        .target(name: "LinuxReachability", dependencies: ["CNetlink", "CSystemdBus", "ReachabilityBase", "LinuxSystem"],
                swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]),
        .target(name: "ResumableDownloads", dependencies: ["CCurl", "CCrypto", "LinuxReachability", "LinuxSystem", "ReachabilityBase"],
                swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]),
        // The vocabulary the agent and the CLI's `download` both write: event lines, JSON values,
        // metric families, the one state-directory resolver and `AgentFailure`. Below both, so
        // `download` does not read through the agent (ReachabilityAgent re-exports it).
        .target(name: "ReachabilityEvents", dependencies: ["LinuxReachability", "ResumableDownloads", "LinuxSystem", "ReachabilityBase"],
                swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]),
        // The download agent as a library: the daemon (`AgentDaemon.run`), the service, its
        // control protocol, server and typed client (`AgentClient`, public: other programs talk
        // to the agent with it), the agent's log and sd_notify.
        .target(name: "ReachabilityAgent", dependencies: ["ReachabilityEvents", "LinuxReachability", "ResumableDownloads", "LinuxSystem",
                                                          "ReachabilityBase"],
                swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]),
        .target(name: "ReachabilityCLI", dependencies: ["LinuxReachability", "ResumableDownloads", "ReachabilityAgent", "ReachabilityEvents",
                                                        "LinuxSystem", "ReachabilityBase"],
                swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]),
        // Release builds link with GNU ld and pack the ~40,000 relative relocations of a static-stdlib
        // PIE into DT_RELR (when glibc >= 2.36, see above): the dynamic loader then touches 8 KiB of relocations
        // at start instead of 0.9 MiB, about 1 MiB less resident memory for every command. (gold,
        // the toolchain's default, cannot pack them; lld can, but resolves the stdlib archives'
        // duplicate specialisations from Foundation proper and links in CoreFoundation and ICU.)
        // They also take the C++ runtime from libstdc++.a (releaseLinkerFlags).
        .executableTarget(name: "reachability", dependencies: ["ReachabilityCLI"], exclude: ["linker"],
                          linkerSettings: releaseLinkerFlags.isEmpty ? []
                              : [.unsafeFlags(releaseLinkerFlags, .when(platforms: [.linux], configuration: .release))]),
        .target(name: "ResumableURLSession", dependencies: ["ResumableDownloads", "ReachabilityAgent", "LinuxReachability", "LinuxSystem",
                                                            "ReachabilityBase"]),
        .testTarget(name: "ResumableURLSessionTests", dependencies: ["ResumableURLSession", "TestSupport"]),
        // Runs a ResumableURLSession inside a namespace for IntegrationTests/URLSessionOutageTests.
        .executableTarget(name: "urlsession-probe", dependencies: ["ResumableURLSession", "ResumableDownloads", "LinuxReachability",
                                                                  "ProbeSupport"],
                          path: "Tests/URLSessionProbe"),
        // The delegate-call lines both probes print.
        .target(name: "ProbeSupport", dependencies: ["ResumableURLSession"], path: "Tests/ProbeSupport"),
        // A program with a background ResumableURLSession, for IntegrationTests/BackgroundSession*
        // and bench/background_bench.py (also the command the agent launches for its events).
        .executableTarget(name: "background-probe", dependencies: ["ResumableURLSession", "ResumableDownloads", "ProbeSupport"],
                          path: "Tests/BackgroundProbe"),
        // Benchmark driver for bench/download.sh (ResumableDownloads vs curl -o).
        .executableTarget(name: "download-bench", dependencies: ["ResumableDownloads"], path: "bench/download-bench"),
        // Samples: real programs built by `swift build`, smoke-tested in IntegrationTests.
        .executableTarget(name: "HalfTunes", dependencies: ["ResumableDownloads", "LinuxReachability"], path: "Samples/HalfTunes"),
        .executableTarget(name: "ReachabilityBanner", dependencies: ["LinuxReachability"], path: "Samples/ReachabilityBanner"),
        .executableTarget(name: "HalfTunesURLSession", dependencies: ["ResumableURLSession", "LinuxReachability"],
                          path: "Samples/HalfTunesURLSession"),
        // The WWDC background-tasks sample: a timer run hands its request to a background session.
        .executableTarget(name: "StormWatch", dependencies: ["ResumableURLSession"], path: "Samples/StormWatch",
                          exclude: ["README.md"]),
        .executableTarget(name: "WaitThenFetch", dependencies: ["ResumableDownloads", "LinuxReachability"], path: "Samples/WaitThenFetch"),
        .testTarget(name: "LinuxReachabilityTests", dependencies: ["LinuxReachability", "TestSupport"]),
        .testTarget(name: "LinuxSystemTests", dependencies: ["LinuxSystem", "TestSupport"]),
        .testTarget(name: "ReachabilityBaseTests", dependencies: ["ReachabilityBase", "TestSupport"]),
        // The one support module of the test targets: built products, child processes, scratch
        // directories, waiting with a deadline, an event log, a real metrics parser, namespaces,
        // the servers (nginx, the hostile server, upload and tus), agent and probe processes.
        .target(name: "TestSupport", dependencies: ["ResumableDownloads", "LinuxReachability", "ResumableURLSession"],
                path: "Tests/TestSupport"),
        .testTarget(name: "ResumableDownloadsTests", dependencies: ["ResumableDownloads", "TestSupport"]),
        .testTarget(name: "ReachabilityAgentTests", dependencies: ["ReachabilityAgent", "TestSupport"]),
        .testTarget(name: "ReachabilityEventsTests", dependencies: ["ReachabilityEvents", "TestSupport"]),
        .testTarget(name: "ReachabilityCLITests", dependencies: ["ReachabilityCLI", "TestSupport"]),
        .testTarget(name: "IntegrationTests", dependencies: ["TestSupport", "LinuxReachability", "ResumableDownloads", "ReachabilityCLI", "LinuxSystem",
                                                          "ResumableURLSession"]),
    ],
    swiftLanguageModes: [.v6]
)
