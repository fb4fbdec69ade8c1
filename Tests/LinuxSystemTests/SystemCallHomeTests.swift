import Foundation
import Testing

/// Issue 20: one home for system calls. Every raw call goes through LinuxSystem (its
/// Internals/Syscalls*.swift and the CLinuxSystem shim it alone imports), so errno handling and
/// EINTR retries live once. This reads the sources and fails on a raw call anywhere else.
///
/// A call counts when the name is followed by `(` and is not a member (`descriptor.close()`),
/// a declaration (`func send(`), or a name the same file declares itself (a local `send`, an
/// enum case `exit`, a closure parameter `sleep`): those are Swift's, not the C library's.
@Suite("one home for system calls")
struct SystemCallHomeTests {
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The C library's system call wrappers and their close relatives (errno text, name lookup).
    static let rawCalls = Set("""
        open openat read write pread pwrite close stat lstat fstat fstatat rename renameat renameat2 unlink unlinkat mkdir \
        mkdirat rmdir chmod fchmod chown fchown socket bind connect accept accept4 listen send sendto sendmsg recv recvfrom \
        recvmsg setsockopt getsockopt poll ppoll epoll_wait epoll_ctl eventfd setns fsync fdatasync sync_file_range \
        ftruncate flock fcntl dup dup2 dup3 pipe pipe2 kill sigaction signal pthread_sigmask sigprocmask sigemptyset \
        sigaddset pthread_create pthread_detach getpid geteuid getuid getegid getgid umask readlink readlinkat symlink link \
        linkat isatty getaddrinfo freeaddrinfo gai_strerror shutdown mount umount syscall strerror usleep nanosleep sleep \
        pause exit _exit access faccessat getpwuid getpwuid_r opendir fdopendir readdir closedir rewinddir execve execv \
        execvp fork getcwd chdir uname sysconf prctl ioctl mmap munmap fsopen fsmount fsconfig getsockname
        """.split(whereSeparator: \.isWhitespace).map(String.init))

    struct Hit: CustomStringConvertible {
        var file: String
        var line: Int
        var name: String
        var description: String { "\(file):\(line): \(name)(" }
    }

    /// The names `text` declares itself: functions, cases, constants, variables and parameters.
    static func localNames(_ text: String) -> Set<String> {
        var names: Set<String> = []
        let declaration = try! NSRegularExpression(pattern: #"\b(?:func|case|let|var)\s+(\w+)|[(,]\s*(\w+)\s*(?:\w+\s*)?:"#)
        let range = NSRange(text.startIndex..., in: text)
        for match in declaration.matches(in: text, range: range) {
            for group in 1...2 {
                if let found = Range(match.range(at: group), in: text) { names.insert(String(text[found])) }
            }
        }
        return names
    }

    static func rawCallHits(in relativePath: String) throws -> [Hit] {
        let text = try String(contentsOf: packageRoot.appendingPathComponent(relativePath), encoding: .utf8)
        let local = localNames(text)
        let call = try NSRegularExpression(pattern: #"(?<![\w.])(\w+)\s*\("#)
        let errno = try NSRegularExpression(pattern: #"(?<![\w.])errno\b(?!\s*\w*\s*:)"#)
        var hits: [Hit] = []
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            // Strings and comments say what they like.
            var line = String(rawLine)
            line = line.replacingOccurrences(of: #""(?:\\.|[^"\\])*""#, with: "\"\"", options: .regularExpression)
            if let comment = line.range(of: "//") { line = String(line[..<comment.lowerBound]) }
            let range = NSRange(line.startIndex..., in: line)
            for match in call.matches(in: line, range: range) {
                guard let found = Range(match.range(at: 1), in: line) else { continue }
                let name = String(line[found])
                if rawCalls.contains(name), !local.contains(name), !line[..<found.lowerBound].hasSuffix("func ") {
                    hits.append(Hit(file: relativePath, line: number + 1, name: name))
                }
            }
            if errno.firstMatch(in: line, range: range) != nil, !local.contains("errno") {
                hits.append(Hit(file: relativePath, line: number + 1, name: "errno"))
            }
        }
        return hits
    }

    /// Every Swift file under Sources/ but LinuxSystem's.
    static func swiftSources() -> [String] {
        let sources = packageRoot.appendingPathComponent("Sources")
        guard let walker = FileManager.default.enumerator(atPath: sources.path) else { return [] }
        var files: [String] = []
        while let path = walker.nextObject() as? String {
            if path.hasSuffix(".swift"), !path.hasPrefix("LinuxSystem/") { files.append("Sources/" + path) }
        }
        return files.sorted()
    }

    @Test func noRawSystemCallOutsideLinuxSystem() throws {
        let files = Self.swiftSources()
        #expect(files.count > 80, "found \(files.count) files under \(Self.packageRoot.path)/Sources")
        let hits = try files.flatMap(Self.rawCallHits)
        #expect(hits.isEmpty, "call LinuxSystem's typed API instead (Errno, EINTR and descriptors live there): \(hits)")
    }

    @Test func onlyLinuxSystemImportsItsShim() throws {
        for file in Self.swiftSources() {
            let text = try String(contentsOf: Self.packageRoot.appendingPathComponent(file), encoding: .utf8)
            #expect(!text.contains("import CLinuxSystem"), "\(file)")
        }
    }

    /// CNetlink keeps libnl and netlink's constants; namespaces, mounts, eventfd, reads and
    /// socket options are LinuxSystem's.
    @Test func theNetlinkShimKeepsOnlyNetlink() throws {
        let text = try String(contentsOf: Self.packageRoot.appendingPathComponent("Sources/CNetlink/shim.h"), encoding: .utf8)
        let shim = text.replacingOccurrences(of: #"/\*[\s\S]*?\*/"#, with: "", options: .regularExpression)
        for call in ["setns", "fsopen", "fsmount", "eventfd", "recv(", "setsockopt", "getsockopt", "fcntl", "SYS_"] {
            #expect(!shim.contains(call), "CNetlink/shim.h calls \(call)")
        }
    }

    /// The check can fail: a raw call in a file is found, a member or a local name is not.
    @Test func theCheckFindsWhatItLooksFor() throws {
        let scratch = Self.packageRoot.appendingPathComponent(".build/syscall-home-\(UUID().uuidString).swift")
        try """
            func send(_ x: Int) {}
            let fd = open("/x", 0)     // open( in a comment is fine
            descriptor.close()
            send(1)
            let text = "close(3)"
            if errno == 4 {}
            """.write(to: scratch, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let hits = try Self.rawCallHits(in: scratch.path.replacingOccurrences(of: Self.packageRoot.path + "/", with: ""))
        #expect(hits.map(\.name) == ["open", "errno"])
    }
}
