import FoundationEssentials
import LinuxSystem

/// `--metrics-file PATH`: replaced whole on every write, the way node_exporter's textfile
/// collector needs it (a reader sees the old file or the new one, never half of one).
///
/// The directory is opened and checked once, at start, and every later call is relative to that
/// descriptor (`openat`/`renameat`), so renaming or swapping the directory path afterwards
/// cannot redirect the writes. Each write creates a fresh temporary file next to the target
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`: never an existing file or a planted link), writes, fsyncs,
/// renames it over the target and fsyncs the directory. `rename` replaces a symlink or hard link
/// at the target's name, never the file it points to.
///
/// The way to the directory is checked as issue 7's `CheckedDirectory` checks shared
/// directories: no symbolic link another user owns or could have replaced is followed.
///
/// Refused at start: a directory writable by every user (even with the sticky bit, like /tmp):
/// another user could create the name first, or (without the sticky bit) replace the file
/// between writes and feed node_exporter numbers of their choosing. Also refused: a directory
/// owned by another user (not root), who could do the same. Group-writable directories are
/// accepted: their group is the administrator's choice.
final class MetricsFile: Sendable {
    /// The path as given (absolute), for messages.
    let path: String
    /// The directory part, for messages.
    let directoryPath: String
    /// The file's name inside the directory.
    let name: String
    /// What a user should know but that does not stop the tool (a name node_exporter skips).
    let warnings: [String]
    /// The checked directory, open for the life of this object.
    private let directory: CheckedDirectory

    /// Opens and checks the directory; throws `CommandFailure` (exit 73) with the reason.
    init(path: String, effectiveUserID: UInt32) throws {
        let url = URL(fileURLWithPath: path)
        let name = url.lastPathComponent
        guard !path.hasSuffix("/"), !name.isEmpty, name != ".", name != "..", name != "/" else {
            throw Self.failure("--metrics-file \(path) names a directory; give a file name such as reachability.prom")
        }
        let directoryPath = url.deletingLastPathComponent().path
        self.path = path
        self.name = name
        self.directoryPath = directoryPath

        // The way there: opened one component at a time, no symbolic link another user could
        // have planted (issue 7's CheckedDirectory, `.shared`: only the way is checked there).
        let directory: CheckedDirectory
        do {
            directory = try CheckedDirectory.open(directoryPath, policy: .shared)
        } catch where error.errno == .noSuchFile {
            throw Self.failure("cannot use --metrics-file \(path): \(error.path) does not exist; create the directory first (e.g. install -d -m 0755 \(directoryPath))")
        } catch {
            throw Self.failure("cannot use --metrics-file \(path): \(error)")
        }
        // The directory itself: nobody but its owner (us or root) may replace the file.
        let status = directory.status
        let mode = String(status.permissions & 0o7777, radix: 8)
        if status.permissions & 0o002 != 0 {
            throw Self.failure("refusing --metrics-file \(path): \(directoryPath) is writable by every user (mode \(mode)), so another user could put their own file in its place; use a directory only you or root can write, such as /var/lib/node_exporter/textfile_collector")
        }
        if status.ownerID != effectiveUserID, status.ownerID != 0 {
            throw Self.failure("refusing --metrics-file \(path): \(directoryPath) belongs to uid \(status.ownerID), who could replace the file; use a directory owned by you or root")
        }
        if let existing = try? directory.status(of: name), existing.kind == .directory {
            throw Self.failure("cannot use --metrics-file \(path): it is a directory")
        }
        self.directory = directory
        warnings = name.hasSuffix(".prom") ? []
            : ["--metrics-file \(path): node_exporter's textfile collector reads only files whose names end in .prom"]
    }

    /// Replaces the file's contents with `text`; throws `CommandFailure` (exit 74) with the step that failed.
    func write(_ text: String) throws {
        // 0644 whatever the umask: node_exporter runs as its own user and must read the file. The
        // temporary name is one node_exporter skips (hidden, no .prom suffix).
        do {
            try directory.writeAtomically(Array(text.utf8), to: name, mode: 0o644,
                                          temporaryName: CheckedDirectory.uniqueTemporaryName(for: name))
        } catch {
            throw Self.failure("cannot write --metrics-file \(path): \(error)", exitCode: .ioError)
        }
    }

    private static func failure(_ message: String, exitCode: ExitCode = .cannotCreate) -> CommandFailure {
        CommandFailure(message: message, exitCode: exitCode)
    }
}
