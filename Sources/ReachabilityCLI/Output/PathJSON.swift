import FoundationEssentials
import LinuxReachability
import ReachabilityEvents

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
            "isRoaming": .bool(path.isRoaming),
            "isConstrained": .bool(path.isConstrained),
            "supportsIPv4": .bool(path.supportsIPv4),
            "supportsIPv6": .bool(path.supportsIPv6),
            "gateways": .array(path.gateways.map(JSONValue.string)),
            "routes": .array(path.routes.map(route)),
            "interfaces": .array(path.interfaces.map(interface)),
            "connectivity": .string(path.connectivity.rawValue),
            "portalURL": .string(path.portalURL),
            "connectivityCheck": path.connectivityEvidence.map(evidence) ?? .null,
            "sources": .array(path.factSources.map(source)),
        ])
    }

    static func evidence(_ evidence: ConnectivityEvidence) -> JSONValue {
        .object([
            "source": .string(evidence.source == .check ? "check" : "NetworkManager"),
            "url": .string(evidence.source == .check ? evidence.url : nil),
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
            "isExpensive": .bool(interface.isExpensive),
            "costReason": .string(interface.costReason),
            "metered": .string(interface.metered?.rawValue),
            "cellular": interface.cellular.map(cellular) ?? .null,
        ])
    }

    /// `{"isRoaming":false,"registration":"home","accessTechnologies":["lte"],"operatorName":"..."}`
    static func cellular(_ cellular: CellularStatus) -> JSONValue {
        .object([
            "isRoaming": .bool(cellular.isRoaming),
            "registration": .string(cellular.registration),
            "accessTechnologies": .array(cellular.accessTechnologies.map(JSONValue.string)),
            "operatorName": .string(cellular.operatorName),
        ])
    }

    /// `{"service":"NetworkManager","state":"used","detail":"pid 812, ..."}`
    static func source(_ source: FactSource) -> JSONValue {
        .object([
            "service": .string(source.service.rawValue),
            "state": .string(source.state.rawValue),
            "detail": .string(source.detail),
        ])
    }
}
