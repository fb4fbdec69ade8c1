import Foundation
import Synchronization
import Testing
import ReachabilityAgent
@testable import ResumableURLSession
import TestSupport

/// A temporary directory removed on deinit.
typealias TemporaryDirectory = ScratchDirectory

extension ScratchDirectory {
    convenience init() throws { try self.init("us") }
}

@Suite("Session state directory")
struct SessionDirectoryTests {
    static func mode(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
    }

    @Test func createsPrivateDirectoriesAndAKeyThatPersists() throws {
        let temporary = try TemporaryDirectory()
        let root = temporary.url.appendingPathComponent("a/b/state")
        let first = try SessionDirectory(root: root)
        #expect(try Self.mode(root.path) == 0o700)
        #expect(try Self.mode(root.path + "/downloads") == 0o700)
        #expect(try Self.mode(root.path + "/records") == 0o700)
        #expect(try Self.mode(root.path + "/resume-data.key") == 0o600)
        #expect(first.key.count == 32 && Set(first.key).count > 4)
        let second = try SessionDirectory(root: root)
        #expect(second.key == first.key, "a later process reads the same key")
        let other = try SessionDirectory(root: temporary.url.appendingPathComponent("other"))
        #expect(other.key != first.key)
    }

    /// Sessions (threads here, processes in life) starting together on a new directory agree on
    /// one key: the loser of the rename race reads the winner's.
    @Test func concurrentSessionsShareOneKey() throws {
        for _ in 0..<20 {
            let temporary = try TemporaryDirectory()
            let root = temporary.url.appendingPathComponent("state")
            let keys = Mutex<[[UInt8]]>([])
            DispatchQueue.concurrentPerform(iterations: 8) { _ in
                if let directory = try? SessionDirectory(root: root) { keys.withLock { $0.append(directory.key) } }
            }
            let all = keys.withLock { $0 }
            #expect(all.count == 8 && Set(all).count == 1)
            let left = try FileManager.default.contentsOfDirectory(atPath: root.path)
            #expect(Set(left) == ["downloads", "records", "resume-data.key"], "no temporary key left: \(left)")
        }
    }

    @Test func refusesADirectoryOthersCanWrite() throws {
        let temporary = try TemporaryDirectory()
        let root = temporary.url.appendingPathComponent("state")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: false)
        chmod(root.path, 0o777)
        #expect(throws: SessionStorageError.self) { try SessionDirectory(root: root) }
        chmod(root.path, 0o755)
        _ = try SessionDirectory(root: root)
    }

    /// The engine's rule (LinuxSystem.CheckedDirectory): a symbolic link on the way is followed
    /// only when this user (or root) owns it and nobody else could have replaced it; inside the
    /// state directory, never.
    @Test func symlinksOnlyWhenTrusted() throws {
        let temporary = try TemporaryDirectory()
        let elsewhere = temporary.url.appendingPathComponent("elsewhere")
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: false)
        let root = temporary.url.appendingPathComponent("state")
        try FileManager.default.createSymbolicLink(at: root, withDestinationURL: elsewhere)
        _ = try SessionDirectory(root: root)   // ours, in a directory only we can write: followed

        if geteuid() == 0 {
            let planted = temporary.url.appendingPathComponent("planted")
            try FileManager.default.createSymbolicLink(at: planted, withDestinationURL: elsewhere)
            #expect(lchown(planted.path, 65534, 65534) == 0)
            #expect(throws: SessionStorageError.self, "a link another user owns") { try SessionDirectory(root: planted) }
        }

        let root2 = temporary.url.appendingPathComponent("state2")
        try FileManager.default.createDirectory(at: root2, withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(at: root2.appendingPathComponent("downloads"), withDestinationURL: elsewhere)
        #expect(throws: SessionStorageError.self, "inside the state directory") { try SessionDirectory(root: root2) }
    }

    @Test func refusesAKeyOthersCanRead() throws {
        let temporary = try TemporaryDirectory()
        let root = temporary.url.appendingPathComponent("state")
        _ = try SessionDirectory(root: root)
        chmod(root.path + "/resume-data.key", 0o644)
        #expect(throws: SessionStorageError.self) { try SessionDirectory(root: root) }
    }

    @Test func partialFileIdentityAndHostileFiles() throws {
        let temporary = try TemporaryDirectory()
        let directory = try SessionDirectory(root: temporary.url.appendingPathComponent("state"))
        let id = UUID()
        #expect(try directory.partialFile(for: id) == nil, "absent")
        let partial = directory.downloads.appendingPathComponent(ResumeData.partialFileName(for: id))
        try Data(count: 1000).write(to: partial)
        let identity = try #require(try directory.partialFile(for: id))
        #expect(identity.size == 1000)
        var info = stat()
        #expect(stat(partial.path, &info) == 0 && UInt64(info.st_ino) == identity.inode)

        // A hard link to a file elsewhere (say /etc/passwd for root) must not be written through.
        let outside = temporary.url.appendingPathComponent("outside")
        try Data("precious".utf8).write(to: outside)
        let linked = UUID()
        #expect(link(outside.path, directory.downloads.appendingPathComponent(ResumeData.partialFileName(for: linked)).path) == 0)
        #expect(throws: ResumeDataError.unsafeFile) { try directory.partialFile(for: linked) }

        let symlinked = UUID()
        try FileManager.default.createSymbolicLink(
            at: directory.downloads.appendingPathComponent(ResumeData.partialFileName(for: symlinked)), withDestinationURL: outside)
        #expect(throws: ResumeDataError.unsafeFile) { try directory.partialFile(for: symlinked) }

        let fifo = UUID()
        #expect(mkfifo(directory.downloads.appendingPathComponent(ResumeData.partialFileName(for: fifo)).path, 0o600) == 0)
        #expect(throws: ResumeDataError.unsafeFile) { try directory.partialFile(for: fifo) }
        #expect(try String(contentsOf: outside, encoding: .utf8) == "precious")
    }

    @Test func lockIsExclusiveAcrossSessionsAndReleased() throws {
        let temporary = try TemporaryDirectory()
        let root = temporary.url.appendingPathComponent("state")
        let one = try SessionDirectory(root: root)
        let two = try SessionDirectory(root: root)
        let id = UUID()
        let lock = try one.lock(id)
        #expect(throws: ResumeDataError.inUse) { try two.lock(id) }
        #expect(throws: ResumeDataError.inUse) { try one.lock(id) }
        lock.release()
        #expect(!FileManager.default.fileExists(atPath: one.downloads.appendingPathComponent(id.uuidString + ".lock").path))
        let again = try two.lock(id)
        again.release()
    }

    @Test func removeFilesTouchesOnlyThatDownload() throws {
        let temporary = try TemporaryDirectory()
        let directory = try SessionDirectory(root: temporary.url.appendingPathComponent("state"))
        let (a, b) = (UUID(), UUID())
        for id in [a, b] {
            try Data([1]).write(to: directory.downloads.appendingPathComponent(ResumeData.partialFileName(for: id)))
            try Data([1]).write(to: directory.records.appendingPathComponent(id.uuidString + ".json"))
        }
        directory.removeFiles(of: a)
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.downloads.path)
            + FileManager.default.contentsOfDirectory(atPath: directory.records.path)
        #expect(Set(left) == [ResumeData.partialFileName(for: b), b.uuidString + ".json"])
    }

    @Test func leftoversOlderThanTheLifetimeAreRemovedUnlessInUse() throws {
        let temporary = try TemporaryDirectory()
        let directory = try SessionDirectory(root: temporary.url.appendingPathComponent("state"))
        let (old, recent, busy) = (UUID(), UUID(), UUID())
        for id in [old, recent, busy] {
            try Data([1]).write(to: directory.downloads.appendingPathComponent(ResumeData.partialFileName(for: id)))
            try Data([1]).write(to: directory.records.appendingPathComponent(id.uuidString + ".json"))
        }
        let lock = try directory.lock(busy)
        defer { lock.release() }
        // "Now" is a day later: everything is a day old; with a two-day lifetime nothing goes.
        let later = Date().addingTimeInterval(24 * 3600)
        #expect(directory.removeLeftovers(olderThan: 2 * 24 * 3600, now: later).isEmpty)
        // Touch `recent` in that future, so only `old` and `busy` are old; `busy` is locked.
        let recentPartial = directory.downloads.appendingPathComponent(ResumeData.partialFileName(for: recent)).path
        var times = [timespec(tv_sec: Int(later.timeIntervalSince1970), tv_nsec: 0),
                     timespec(tv_sec: Int(later.timeIntervalSince1970), tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, recentPartial, &times, 0) == 0)
        #expect(directory.removeLeftovers(olderThan: 3600, now: later) == [old])
        #expect(try directory.partialFile(for: old) == nil)
        #expect(try directory.partialFile(for: recent) != nil)
        #expect(try directory.partialFile(for: busy) != nil)
        #expect(!FileManager.default.fileExists(atPath: directory.records.appendingPathComponent(old.uuidString + ".json").path))
    }

    /// Issue 20/22: `Configuration.default` keeps its files where every product keeps state,
    /// by the agent's and the command line's rule (it ignored REACHABILITY_STATE_DIR and used an
    /// XDG_STATE_HOME that belonged to another user).
    @Test func theDefaultDirectoryFollowsTheOneStateDirectoryRule() {
        func directory(_ environment: [String: String], uid: UInt32 = 1000, xdgOwner: UInt32 = 1000) -> String {
            let system = StateDirectoryLocation.System(effectiveUserID: uid, workingDirectory: "/w",
                                                       owner: { _ in xdgOwner }, passwdHome: { "/home/pw" })
            return ResumableURLSession.Configuration.defaultStateDirectory(environment: environment, system: system).path
        }
        #expect(directory(["REACHABILITY_STATE_DIR": "/srv/state", "XDG_STATE_HOME": "/x"]) == "/srv/state/url-session")
        #expect(directory(["XDG_STATE_HOME": "/x", "HOME": "/home/u"]) == "/x/reachability/url-session")
        #expect(directory(["XDG_STATE_HOME": "/x", "HOME": "/home/u"], xdgOwner: 1001) == "/home/u/.local/state/reachability/url-session",
                "another user's XDG_STATE_HOME is not used")
        #expect(directory(["HOME": "/root"], uid: 0) == "/var/lib/reachability/url-session")
        #expect(directory([:]) == "/home/pw/.local/state/reachability/url-session")
    }
}
