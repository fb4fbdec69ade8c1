import FoundationEssentials
import Glibc
import LinuxReachability
import ReachabilityAgent

/// The `--json` object for one path; the key order is part of the output format.
enum PathJSON {
    /// `{"time":...,"status":...,"reason":...,"connection":...,"interface":...,...}`
    static func object(_ path: NetworkPath, at time: Date) -> JSONValue {
        .object([
            "time": .string(PathText.timestamp(time)),
            "status": .string(path.status.rawValue),
            "reason": .string(path.unsatisfiedReason?.rawValue),
            "connection": .string(path.connection.rawValue),
            "interface": .string(path.isSatisfied ? path.primaryInterface?.name : nil),
            "index": path.isSatisfied ? path.primaryInterface.map { .integer(Int($0.index)) } ?? .null : .null,
            "sourceAddress": .string(path.primaryRoute?.sourceAddress),
            "isExpensive": .bool(path.isExpensive),
            "supportsIPv4": .bool(path.supportsIPv4),
            "supportsIPv6": .bool(path.supportsIPv6),
            "gateways": .array(path.gateways.map(JSONValue.string)),
            "routes": .array(path.routes.map(route)),
            "interfaces": .array(path.interfaces.map(interface)),
            "connectivity": .string(path.connectivity.rawValue),
            "portalURL": .string(path.portalURL),
            "connectivityCheck": path.connectivityEvidence.map(evidence) ?? .null,
        ])
    }

    static func evidence(_ evidence: ConnectivityEvidence) -> JSONValue {
        .object([
            "url": .string(evidence.url),
            "time": .string(evidence.time.map(PathText.timestamp)),
            "answer": .string(evidence.answer),
        ])
    }

    /// One NDJSON line.
    static func line(_ path: NetworkPath, at time: Date) -> String {
        object(path, at: time).serialized
    }

    static func route(_ route: PathRoute) -> JSONValue {
        .object([
            "family": .string(route.family.rawValue),
            "interface": .string(route.interfaceName),
            "index": .integer(Int(route.interfaceIndex)),
            "gateway": .string(route.gateway),
            "sourceAddress": .string(route.sourceAddress),
        ])
    }

    static func interface(_ interface: NetworkInterface) -> JSONValue {
        .object([
            "name": .string(interface.name),
            "index": .integer(Int(interface.index)),
            "type": .string(interface.type.rawValue),
            "reason": .string(interface.classificationReason),
            "isUp": .bool(interface.isUp),
            "hasCarrier": .bool(interface.hasCarrier),
            "addresses": .array(interface.addresses.map(JSONValue.string)),
        ])
    }
}
