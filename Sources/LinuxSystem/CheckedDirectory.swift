#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An open directory that passed a trust check; everything inside it is reached relative to
/// its descriptor (`openat`, `fstatat`, `renameat2`, `unlinkat`) and never through a symbolic
/// link, so a name swapped after the check cannot redirect a write.
///
/// The path is opened one component at a time from `/` with `O_NOFOLLOW`. A symbolic link on
/// the way is followed only when root or the effective user owns it and nobody else could have
/// replaced it (its directory is not writable by others, or is sticky), like the kernel's
/// `protected_symlinks`; any other link is refused. A component that changes between the check
/// and the open (a race) fails closed.
package final class CheckedDirectory: Sendable {
    /// How much the directory itself must be trusted.
    package enum Policy: Sendable, Hashable {
        /// Resume records, locks, sockets: the directory belongs to the effective user (or root)
        /// and nobody else may write to it (it is tightened to 0700 when it is ours); every
        /// directory above it belongs to root or the effective user and is writable by others
        /// only when sticky (like `/tmp`).
        case privateState
        /// Where downloads land: any directory the user names (possibly shared, like `/tmp`);
        /// only the way there is checked (no untrusted symbolic links). Files in it are created
        /// with `O_EXCL` and checked after opening instead.
        case shared
    }

    /// The path it was opened as (symbolic links not resolved), for messages.
    package let path: String
    /// The open directory.
    package let descriptor: FileDescriptor
    /// Its status when it was checked.
    package let status: FileStatus
    package let policy: Policy

    private init(path: String, descriptor: FileDescriptor, status: FileStatus, policy: Policy) {
        self.path = path
        self.descriptor = descriptor
        self.status = status
        self.policy = policy
    }

    deinit { descriptor.close() }

    private static var effectiveUserID: UInt32 { Syscall.effectiveUserID }

    /// One directory on the way, opened and checked.
    private struct Step {
        var descriptor: FileDescriptor
        var status: FileStatus
        var path: String
    }

    /// Opens (and with `creating`, makes missing directories with `mode`) the absolute `path`,
    /// checking it for `policy`.
    package static func open(_ path: String, policy: Policy, creating: Bool = false,
                             mode: UInt32 = 0o700) throws(FileTrustError) -> CheckedDirectory {
        guard path.hasPrefix("/") else { throw .unsafe(path, "is not an absolute path") }
        var steps: [Step] = []
        defer { for step in steps { step.descriptor.close() } }
        do {
            let root = FileDescriptor(rawValue: try Syscall.openat(AT_FDCWD, "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0))
            steps.append(Step(descriptor: root, status: try root.status(), path: ""))
        } catch {
            throw .system("/", "open", error)
        }
        var pending = Array(components(of: path).reversed())
        var linksFollowed = 0
        while let name = pending.popLast() {
            if name == "." { continue }
            if name == ".." {
                if steps.count > 1 { steps.removeLast().descriptor.close() }
                continue
            }
            let parent = steps[steps.count - 1]
            let here = parent.path + "/" + name
            let found = try statusCreatingIfAsked(name, in: parent, at: here, creating: creating, mode: mode)
            if found.kind == .symbolicLink {
                linksFollowed += 1
                guard linksFollowed <= 40 else { throw .system(here, "resolve", .tooManySymbolicLinks) }
                let target = try trustedLinkTarget(name, in: parent, at: here, checked: found)
                if target.hasPrefix("/") {
                    while steps.count > 1 { steps.removeLast().descriptor.close() }
                }
                pending.append(contentsOf: components(of: target).reversed())
                continue
            }
            steps.append(try openDirectory(name, in: parent, at: here, checked: found))
        }
        let final = steps.removeLast()
        return try checked(final, below: steps, policy: policy)
    }

    /// The status of `name` (a link itself, not its target); with `creating`, a missing one is
    /// made first (one made by someone else meanwhile is checked like any existing one).
    private static func statusCreatingIfAsked(_ name: String, in parent: Step, at here: String, creating: Bool,
                                              mode: UInt32) throws(FileTrustError) -> FileStatus {
        do {
            return FileStatus(try Syscall.fstatat(parent.descriptor.rawValue, name, followingSymlinks: false))
        } catch where error == .noSuchFile && creating {
            do {
                try Syscall.mkdirat(parent.descriptor.rawValue, name, mode_t(mode))
            } catch where error == .exists {
                // Made by someone else meanwhile: it is checked like any existing one.
            } catch {
                throw .system(here, "mkdir", error)
            }
            do { return FileStatus(try Syscall.fstatat(parent.descriptor.rawValue, name, followingSymlinks: false)) }
            catch { throw .system(here, "stat", error) }
        } catch {
            throw .system(here, "stat", error)
        }
    }

    /// The target of the link `name` once it is trusted (`checkLink`), read from the very link
    /// that was checked, not one swapped in since.
    private static func trustedLinkTarget(_ name: String, in parent: Step, at here: String,
                                          checked found: FileStatus) throws(FileTrustError) -> String {
        try checkLink(found, at: here, in: parent.status)
        let target: String
        let again: FileStatus
        do {
            target = try Syscall.readlinkat(parent.descriptor.rawValue, name)
            again = FileStatus(try Syscall.fstatat(parent.descriptor.rawValue, name, followingSymlinks: false))
        } catch {
            throw .system(here, "readlink", error)
        }
        guard again.isSameFile(as: found) else { throw .unsafe(here, "changed while it was being checked") }
        return target
    }

    /// Opens the directory `name` without following a link, and keeps it only when it is the
    /// directory that was checked.
    private static func openDirectory(_ name: String, in parent: Step, at here: String,
                                      checked found: FileStatus) throws(FileTrustError) -> Step {
        guard found.kind == .directory else {
            throw .unsafe(here, "is \(found.kindDescription), not a directory")
        }
        let opened: FileDescriptor
        do {
            opened = FileDescriptor(rawValue: try Syscall.openat(parent.descriptor.rawValue, name,
                                                                 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0))
        } catch where error == .tooManySymbolicLinks || error == .notDirectory {
            throw .unsafe(here, "changed while it was being opened (replaced by a symbolic link or file)")
        } catch {
            throw .system(here, "open", error)
        }
        let status: FileStatus
        do { status = try opened.status() } catch { opened.close(); throw .system(here, "stat", error) }
        guard status.isSameFile(as: found) else {
            opened.close()
            throw .unsafe(here, "changed while it was being opened")
        }
        return Step(descriptor: opened, status: status, path: here)
    }

    /// The last directory, checked against `policy` with the ones above it; a private one of
    /// ours is tightened to 0700. Takes `final`'s descriptor (closed on failure).
    private static func checked(_ final: Step, below steps: [Step], policy: Policy) throws(FileTrustError) -> CheckedDirectory {
        let finalPath = final.path.isEmpty ? "/" : final.path
        do throws(FileTrustError) {
            if policy == .privateState {
                for step in steps.dropFirst() { try checkAncestor(step.status, at: step.path, of: finalPath) }
                try checkPrivate(final.status, at: finalPath)
                if final.status.ownerID == effectiveUserID, final.status.permissions & 0o077 != 0 {
                    // Ours and not writable by others: only readable. Records name URLs and files.
                    do { try final.descriptor.setPermissions(0o700) } catch { throw .system(finalPath, "chmod", error) }
                }
            }
        } catch {
            final.descriptor.close()
            throw error
        }
        let status = (try? final.descriptor.status()) ?? final.status
        return CheckedDirectory(path: finalPath, descriptor: final.descriptor, status: status, policy: policy)
    }

    /// Opens (or makes) the subdirectory `name`, checked like this one's policy requires.
    package func subdirectory(_ name: String, creating: Bool = false, mode: UInt32 = 0o700) throws(FileTrustError) -> CheckedDirectory {
        try Self.checkName(name, in: path)
        let here = child(name)
        if creating {
            do { try Syscall.mkdirat(descriptor.rawValue, name, mode_t(mode)) }
            catch where error == .exists {}
            catch { throw .system(here, "mkdir", error) }
        }
        let opened: FileDescriptor
        do {
            opened = FileDescriptor(rawValue: try Syscall.openat(descriptor.rawValue, name,
                                                                 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0))
        } catch where error == .tooManySymbolicLinks || error == .notDirectory {
            let kind = (try? status(of: name))?.kindDescription ?? "not a directory"
            throw .unsafe(here, "is \(kind), not a directory", fix: "remove it")
        } catch {
            throw .system(here, "open", error)
        }
        do throws(FileTrustError) {
            let status: FileStatus
            do { status = try opened.status() } catch { throw .system(here, "stat", error) }
            if policy == .privateState {
                try Self.checkPrivate(status, at: here)
                if status.ownerID == Self.effectiveUserID, status.permissions & 0o077 != 0 {
                    do { try opened.setPermissions(0o700) } catch { throw .system(here, "chmod", error) }
                }
            }
            return CheckedDirectory(path: here, descriptor: opened, status: status, policy: policy)
        } catch {
            opened.close()
            throw error
        }
    }

    /// The path of `name` in this directory, for messages.
    package func child(_ name: String) -> String { path == "/" ? "/" + name : path + "/" + name }

    // MARK: checks

    /// A symbolic link is followed only when root or we own it and nobody else could replace it.
    private static func checkLink(_ link: FileStatus, at path: String, in directory: FileStatus) throws(FileTrustError) {
        let owner = link.ownerID
        guard owner == 0 || owner == effectiveUserID else {
            throw .unsafe(path, "is a symbolic link owned by uid \(owner); it is not followed",
                          fix: "give the real path instead")
        }
        if directory.permissions & 0o002 != 0, !directory.isSticky {
            throw .unsafe(path, "is a symbolic link in a directory anyone may change; it is not followed",
                          fix: "give the real path instead")
        }
    }

    /// A directory above a private one: root's or ours, and only writable by others when sticky
    /// (then nobody else can rename what we own in it).
    private static func checkAncestor(_ status: FileStatus, at path: String, of target: String) throws(FileTrustError) {
        let euid = effectiveUserID
        guard status.ownerID == 0 || status.ownerID == euid else {
            throw .unsafe(path, "(above \(target)) is owned by uid \(status.ownerID), who could replace what is below it",
                          fix: "use a directory whose parents belong to you or root (--state-dir or REACHABILITY_STATE_DIR)")
        }
        if status.isSticky { return }
        if status.permissions & 0o002 != 0 || (status.permissions & 0o020 != 0 && !isOwnPrivateGroup(status)) {
            throw .unsafe(path, "(above \(target)) is writable by other users (mode \(octal(status.permissions)))",
                          fix: "chmod go-w \(path), or use another directory")
        }
    }

    /// The private directory itself: ours or root's, writable by nobody else.
    private static func checkPrivate(_ status: FileStatus, at path: String) throws(FileTrustError) {
        let euid = effectiveUserID
        guard status.ownerID == euid || status.ownerID == 0 else {
            throw .unsafe(path, "is owned by uid \(status.ownerID), not by you (uid \(euid)): whoever owns it could plant files there",
                          fix: "use a directory you own (--state-dir or REACHABILITY_STATE_DIR), or chown \(euid) \(path)")
        }
        if status.permissions & 0o002 != 0 || (status.permissions & 0o020 != 0 && !isOwnPrivateGroup(status)) {
            throw .unsafe(path, "is writable by other users (mode \(octal(status.permissions)))",
                          fix: "chmod 700 \(path)")
        }
    }

    /// Group-writable is harmless when the group is the owner's own (the user-private-group
    /// convention with umask 002): nobody else is in it.
    private static func isOwnPrivateGroup(_ status: FileStatus) -> Bool {
        status.ownerID == effectiveUserID && status.groupID == Syscall.effectiveGroupID && status.ownerID != 0
    }

    static func checkName(_ name: String, in directory: String) throws(FileTrustError) {
        guard !name.isEmpty, name != ".", name != "..", !name.utf8.contains(UInt8(ascii: "/")), !name.utf8.contains(0) else {
            throw .unsafe(directory + "/" + name, "is not a plain file name")
        }
    }

    static func components(of path: String) -> [String] {
        path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
    }

    static func octal(_ permissions: UInt32) -> String {
        let digits = String(permissions, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}
