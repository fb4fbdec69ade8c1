import Foundation
import Synchronization
import Testing
@testable import LinuxSystem
import TestSupport

/// A private scratch directory (under /tmp: root-owned and sticky).
typealias Scratch = ScratchDirectory

extension ScratchDirectory {
    convenience init() throws { try self.init("ls", permissions: 0o700) }
    func at(_ name: String) -> String { path(name) }
}

/// Another user's uid for ownership tests (nobody); only root can give files to it.
let otherUID: UInt32 = 65534

func mode(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]) as? Int) ?? -1
}

@Suite("Checked directories")
struct CheckedDirectoryTests {
    @Test func createsAPrivateDirectoryWithItsParents() throws {
        let scratch = try Scratch()
        let directory = try CheckedDirectory.open(scratch.at("a/b/state"), policy: .privateState, creating: true)
        #expect(directory.path == scratch.at("a/b/state"))
        #expect(mode(scratch.at("a/b/state")) == 0o700)
    }

    @Test func tightensItsOwnReadableDirectory() throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(atPath: scratch.at("s"), withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o755])
        _ = try CheckedDirectory.open(scratch.at("s"), policy: .privateState)
        #expect(mode(scratch.at("s")) == 0o700)
    }

    @Test func refusesAWorldWritableStateDirectoryAndSaysHowToFixIt() throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(atPath: scratch.at("s"), withIntermediateDirectories: false)
        chmod(scratch.at("s"), 0o777)
        let error = #expect(throws: FileTrustError.self) { try CheckedDirectory.open(scratch.at("s"), policy: .privateState) }
        #expect(error?.isUnsafe == true)
        #expect(error?.description.contains("writable by other users") == true)
        #expect(error?.fix == "chmod 700 \(scratch.at("s"))")
        #expect(mode(scratch.at("s")) == 0o777, "a refused directory is left as it was")
    }

    @Test(.enabled(if: isRoot, "chown to another user needs root"))
    func refusesAStateDirectoryOwnedBySomeoneElse() throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(atPath: scratch.at("s"), withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        chown(scratch.at("s"), otherUID, otherUID)
        let error = #expect(throws: FileTrustError.self) { try CheckedDirectory.open(scratch.at("s"), policy: .privateState) }
        #expect(error?.description.contains("owned by uid \(otherUID)") == true)
        // A shared destination directory may belong to anyone.
        _ = try CheckedDirectory.open(scratch.at("s"), policy: .shared)
    }

    @Test(.enabled(if: isRoot, "chown to another user needs root"))
    func refusesAStateDirectoryBelowSomeoneElsesDirectory() throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(atPath: scratch.at("theirs/s"), withIntermediateDirectories: true)
        chown(scratch.at("theirs"), otherUID, otherUID)
        let error = #expect(throws: FileTrustError.self) { try CheckedDirectory.open(scratch.at("theirs/s"), policy: .privateState) }
        #expect(error?.path == scratch.at("theirs"))
        _ = try CheckedDirectory.open(scratch.at("theirs/s"), policy: .shared)
    }

    @Test(.enabled(if: isRoot, "lchown to another user needs root"))
    func neverFollowsSomeoneElsesSymbolicLink() throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(atPath: scratch.at("target"), withIntermediateDirectories: false)
        symlink(scratch.at("target"), scratch.at("link"))
        lchown(scratch.at("link"), otherUID, otherUID)
        for policy in [CheckedDirectory.Policy.privateState, .shared] {
            let error = #expect(throws: FileTrustError.self) { try CheckedDirectory.open(scratch.at("link"), policy: policy) }
            #expect(error?.description.contains("symbolic link owned by uid \(otherUID)") == true)
        }
    }

    @Test func followsItsOwnSymbolicLinkInAPrivateDirectory() throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(atPath: scratch.at("real/state"), withIntermediateDirectories: true)
        symlink("real", scratch.at("link"))
        let directory = try CheckedDirectory.open(scratch.at("link/state"), policy: .privateState)
        let real = try FileManager.default.attributesOfItem(atPath: scratch.at("real/state"))[.systemFileNumber] as? Int
        #expect(Int(directory.status.inode) == real)
    }

    @Test func neverFollowsALinkInADirectoryAnyoneMayChange() throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(atPath: scratch.at("open"), withIntermediateDirectories: false)
        chmod(scratch.at("open"), 0o777)   // no sticky bit: anyone could swap the link
        try FileManager.default.createDirectory(atPath: scratch.at("target"), withIntermediateDirectories: false)
        symlink(scratch.at("target"), scratch.at("open/link"))
        #expect(throws: FileTrustError.self) { try CheckedDirectory.open(scratch.at("open/link"), policy: .shared) }
    }

    @Test func refusesAFileWhereADirectoryShouldBe() throws {
        let scratch = try Scratch()
        _ = FileManager.default.createFile(atPath: scratch.at("f"), contents: Data())
        let error = #expect(throws: FileTrustError.self) { try CheckedDirectory.open(scratch.at("f"), policy: .shared) }
        #expect(error?.description.contains("not a directory") == true)
        mkfifo(scratch.at("p"), 0o600)
        #expect(throws: FileTrustError.self) { try CheckedDirectory.open(scratch.at("p"), policy: .shared) }
    }

    @Test func refusesRelativePaths() {
        #expect(throws: FileTrustError.self) { try CheckedDirectory.open("relative/dir", policy: .shared) }
    }

    @Test func subdirectoriesAreCheckedAndNeverLinks() throws {
        let scratch = try Scratch()
        let root = try CheckedDirectory.open(scratch.at("s"), policy: .privateState, creating: true)
        _ = try root.subdirectory("records", creating: true)
        #expect(mode(scratch.at("s/records")) == 0o700)
        symlink("/etc", scratch.at("s/files"))
        let error = #expect(throws: FileTrustError.self) { try root.subdirectory("files", creating: true) }
        #expect(error?.description.contains("symbolic link") == true)
        #expect(throws: FileTrustError.self) { try root.subdirectory("../escape") }
    }

    /// A component flips between a directory and a link to elsewhere while it is opened: every
    /// open either fails or yields the real directory, never the link's target.
    @Test func aRaceBetweenCheckAndOpenFailsClosed() throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(atPath: scratch.at("elsewhere"), withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: scratch.at("real"), withIntermediateDirectories: false)
        let elsewhere = try #require(FileManager.default.attributesOfItem(atPath: scratch.at("elsewhere"))[.systemFileNumber] as? Int)
        let linkPath = scratch.at("race"), realPath = scratch.at("real"), spare = scratch.at("spare")
        // Not ours to follow: the link lives in a directory anyone may change.
        chmod(scratch.path, 0o777)
        defer { chmod(scratch.path, 0o700) }
        symlink(scratch.at("elsewhere"), spare)
        let stop = Atomic<Bool>(false)
        let flipperEnded = DispatchSemaphore(value: 0)
        let flipper = Thread {
            var isLink = false
            while !stop.load(ordering: .relaxed) {
                if isLink { rename(linkPath, spare); rename(realPath, linkPath) } else { rename(linkPath, realPath); rename(spare, linkPath) }
                isLink.toggle()
            }
            flipperEnded.signal()
        }
        rename(realPath, linkPath)
        flipper.start()
        var opened = 0
        for _ in 0..<3000 {
            if let directory = try? CheckedDirectory.open(linkPath, policy: .shared) {
                opened += 1
                #expect(Int(directory.status.inode) != elsewhere)
            }
        }
        stop.store(true, ordering: .relaxed)
        // The scratch directory goes when the test returns: not while the flipper still renames in it.
        #expect(flipperEnded.wait(timeout: .now() + 20) == .success)
        #expect(opened > 0, "the real directory should open sometimes")
    }
}

@Suite("Files in checked directories")
struct CheckedFileTests {
    @Test func createsExclusivelyAndReopensItsOwnFile() throws {
        let scratch = try Scratch()
        let directory = try CheckedDirectory.open(scratch.path, policy: .shared)
        let created = try directory.openOwnedFile("f.part", creating: .openOrCreate)
        #expect(created.wasCreated)
        created.descriptor.close()
        let again = try directory.openOwnedFile("f.part", creating: .openOrCreate)
        #expect(!again.wasCreated)
        again.descriptor.close()
        #expect(throws: FileTrustError.self) { try directory.openOwnedFile("f.part", creating: .exclusive) }
    }

    /// Plants `f.part` as a second name (`plant`: symlink or link) for a file that reads "keep",
    /// and expects opening it to be refused with `reason`, the file left as it was.
    static func expectRefusedPlant(_ plant: (String, String) -> Int32, _ reason: String,
                                   sourceLocation: SourceLocation = #_sourceLocation) throws {
        let scratch = try Scratch()
        _ = FileManager.default.createFile(atPath: scratch.at("victim"), contents: Data("keep".utf8))
        #expect(plant(scratch.at("victim"), scratch.at("f.part")) == 0, sourceLocation: sourceLocation)
        let directory = try CheckedDirectory.open(scratch.path, policy: .shared)
        let error = #expect(throws: FileTrustError.self, sourceLocation: sourceLocation) {
            try directory.openOwnedFile("f.part", creating: .openOrCreate)
        }
        #expect(error?.description.contains(reason) == true, "\(String(describing: error))", sourceLocation: sourceLocation)
        #expect(FileManager.default.contents(atPath: scratch.at("victim")) == Data("keep".utf8), sourceLocation: sourceLocation)
    }

    @Test func refusesAPlantedSymbolicLinkAndLeavesItsTargetAlone() throws {
        try Self.expectRefusedPlant({ symlink($0, $1) }, "symbolic link")
    }

    @Test func aHardLinkNeverFollowsAPlantedSymbolicLink() throws {
        let scratch = try Scratch()
        let outside = try Scratch()
        _ = FileManager.default.createFile(atPath: outside.at("victim"), contents: Data("keep".utf8))
        symlink(outside.at("victim"), scratch.at("finished"))
        let directory = try CheckedDirectory.open(scratch.path, policy: .privateState)
        // linkat(2) without AT_SYMLINK_FOLLOW: the new name is the link itself, not the victim.
        try directory.link("finished", to: "delivered")
        #expect(try directory.status(of: "delivered")?.kind == .symbolicLink)
        let victim = try #require(try CheckedDirectory.open(outside.path, policy: .privateState).status(of: "victim"))
        #expect(victim.linkCount == 1, "no second name for the file the link points at")
        #expect(FileManager.default.contents(atPath: outside.at("victim")) == Data("keep".utf8))
    }

    @Test func refusesAFIFOWithoutHanging() throws {
        let scratch = try Scratch()
        mkfifo(scratch.at("f.part"), 0o600)
        let directory = try CheckedDirectory.open(scratch.path, policy: .shared)
        let error = #expect(throws: FileTrustError.self) { try directory.openOwnedFile("f.part", creating: .openOrCreate) }
        #expect(error?.description.contains("FIFO") == true)
        #expect(throws: FileTrustError.self) { try directory.readOwnedFile("f.part", limit: 100) }
    }

    @Test func refusesAHardLinkToAnotherFile() throws {
        try Self.expectRefusedPlant({ link($0, $1) }, "hard links")
    }

    @Test(.enabled(if: isRoot, "chown to another user needs root"))
    func refusesSomeoneElsesFile() throws {
        let scratch = try Scratch()
        _ = FileManager.default.createFile(atPath: scratch.at("f.part"), contents: Data("theirs".utf8))
        chown(scratch.at("f.part"), otherUID, otherUID)
        let directory = try CheckedDirectory.open(scratch.path, policy: .shared)
        let error = #expect(throws: FileTrustError.self) { try directory.openOwnedFile("f.part", creating: .openOrCreate) }
        #expect(error?.description.contains("owned by uid \(otherUID)") == true)
    }

    @Test func renameWithoutReplacingKeepsAFileThatAppeared() throws {
        let scratch = try Scratch()
        _ = FileManager.default.createFile(atPath: scratch.at("f.part"), contents: Data("new".utf8))
        _ = FileManager.default.createFile(atPath: scratch.at("f"), contents: Data("someone's".utf8))
        let directory = try CheckedDirectory.open(scratch.path, policy: .shared)
        let error = #expect(throws: FileTrustError.self) { try directory.rename("f.part", to: "f", replacing: false) }
        #expect(error?.isAlreadyExisting == true)
        #expect(FileManager.default.contents(atPath: scratch.at("f")) == Data("someone's".utf8))
        try directory.rename("f.part", to: "g", replacing: false)
        #expect(FileManager.default.contents(atPath: scratch.at("g")) == Data("new".utf8))
    }

    @Test func atomicWritesNeverFollowAPlantedTemporaryName() throws {
        let scratch = try Scratch()
        _ = FileManager.default.createFile(atPath: scratch.at("victim"), contents: Data("keep".utf8))
        let directory = try CheckedDirectory.open(scratch.at("state"), policy: .privateState, creating: true)
        symlink(scratch.at("victim"), scratch.at("state/r.json.tmp"))
        try directory.writeAtomically(Array("{}".utf8), to: "r.json")
        #expect(FileManager.default.contents(atPath: scratch.at("victim")) == Data("keep".utf8))
        #expect(try directory.readOwnedFile("r.json", limit: 10) == Array("{}".utf8))
        #expect(mode(scratch.at("state/r.json")) == 0o600)
        #expect(throws: FileTrustError.self) { try directory.readOwnedFile("r.json", limit: 1) }
    }

    /// The one atomic write serves records (replace), the URLSession key (never replace: a
    /// racing process keeps its key) and metrics files (exact mode, a hidden unique temporary).
    @Test func atomicWritesCanRefuseToReplaceAndSetTheExactMode() throws {
        let scratch = try Scratch()
        let directory = try CheckedDirectory.open(scratch.at("state"), policy: .privateState, creating: true)
        try directory.writeAtomically(Array("first".utf8), to: "key", replacing: false,
                                      temporaryName: CheckedDirectory.uniqueTemporaryName(for: "key"))
        let error = #expect(throws: FileTrustError.self) {
            try directory.writeAtomically(Array("second".utf8), to: "key", replacing: false,
                                          temporaryName: CheckedDirectory.uniqueTemporaryName(for: "key"))
        }
        #expect(error?.isAlreadyExisting == true)
        #expect(try directory.readOwnedFile("key", limit: 10) == Array("first".utf8))
        let previous = umask(0o077)
        defer { umask(previous) }
        try directory.writeAtomically(Array("m".utf8), to: "m.prom", mode: 0o644)
        #expect(mode(scratch.at("state/m.prom")) == 0o644, "the mode is exact whatever the umask")
        #expect(try directory.entries().sorted() == ["key", "m.prom"], "no temporary file is left")
        #expect(CheckedDirectory.uniqueTemporaryName(for: "a") != CheckedDirectory.uniqueTemporaryName(for: "a"))
        #expect(CheckedDirectory.uniqueTemporaryName(for: "a.prom").hasPrefix(".a.prom."))
    }

    /// A group of atomic writes (the agent's group commit): each file in place with its bytes and
    /// exact mode, one bad name fails alone, an existing file is replaced, no temporary is left.
    @Test func groupWritesPutEveryFileInPlaceAndFailOneAlone() throws {
        let scratch = try Scratch()
        let directory = try CheckedDirectory.open(scratch.at("state"), policy: .privateState, creating: true)
        try directory.writeAtomically(Array("old".utf8), to: "b.json")
        let results = directory.writeAtomically(group: [("a.json", Array("A".utf8)), ("../x", Array("X".utf8)),
                                                        ("b.json", Array("B".utf8))])
        #expect(results.count == 3)
        #expect(results[0] == nil && results[2] == nil, "\(results)")
        #expect(results[1] != nil, "a name with a slash is refused")
        #expect(try directory.readOwnedFile("a.json", limit: 10) == Array("A".utf8))
        #expect(try directory.readOwnedFile("b.json", limit: 10) == Array("B".utf8))
        #expect(mode(scratch.at("state/a.json")) == 0o600)
        #expect(try directory.entries().sorted() == ["a.json", "b.json"], "no temporary file is left")
        #expect(directory.writeAtomically(group: []).isEmpty)
    }

    /// A group's fsyncs side by side (`SideBySideSync`): every file gets its own answer in order,
    /// and a descriptor whose sync fails (a pipe: EINVAL) is reported for that file alone, with
    /// the calling thread alone (width 1), a few helpers, and more files than threads.
    @Test(arguments: [1, 2, 4, 16])
    func sideBySideSyncsReportEachFilesOwnFailure(_ width: Int) throws {
        let scratch = try Scratch()
        let directory = try CheckedDirectory.open(scratch.at("data"), policy: .privateState, creating: true)
        let pipe = Pipe()
        let broken = FileDescriptor(rawValue: pipe.fileHandleForWriting.fileDescriptor)
        var files: [FileDescriptor] = []
        defer { for file in files where file.rawValue != broken.rawValue { file.close() } }
        var failing = Set<Int>()
        for index in 0..<12 {
            if index % 5 == 1 {
                files.append(broken)
                failing.insert(index)
                continue
            }
            let file = try directory.openOwnedFile("f\(index)", creating: .exclusive, mode: 0o600).descriptor
            try file.writeAll(Array(repeating: UInt8(index), count: 64 << 10))
            files.append(file)
        }
        for includingMetadata in [false, true] {
            let results = SideBySideSync.sync(files, includingMetadata: includingMetadata, width: width)
            #expect(results.count == files.count)
            for (index, result) in results.enumerated() {
                if failing.contains(index) {
                    #expect(result == .invalidArgument, "file \(index): \(String(describing: result))")
                } else {
                    #expect(result == nil, "file \(index): \(String(describing: result))")
                }
            }
        }
        #expect(SideBySideSync.sync([]).isEmpty)
        #expect(SideBySideSync.sync([broken]) == [.invalidArgument], "one file: on the calling thread")
    }

    @Test func namesAreSingleComponents() throws {
        let scratch = try Scratch()
        let directory = try CheckedDirectory.open(scratch.path, policy: .shared)
        for name in ["", ".", "..", "a/b", "../x"] {
            #expect(throws: FileTrustError.self) { try directory.openOwnedFile(name, creating: .openOrCreate) }
        }
    }

    @Test func anExclusiveLockKeepsASecondWriterOut() throws {
        let scratch = try Scratch()
        let directory = try CheckedDirectory.open(scratch.path, policy: .shared)
        let first = try directory.openOwnedFile("f.part", creating: .openOrCreate).descriptor
        let second = try directory.openOwnedFile("f.part", creating: .openOrCreate).descriptor
        defer { first.close(); second.close() }
        #expect(try first.tryLockExclusive())
        #expect(try !second.tryLockExclusive())
    }
}
