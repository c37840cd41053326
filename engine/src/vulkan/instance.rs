//! The Vulkan loader and instance: optional validation (with synchronization
//! validation) and a debug-utils messenger feeding a [`ValidationLog`]; physical
//! device listing and choice.

use std::ffi::{c_char, CStr};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use ash::{ext::debug_utils, vk};

use super::error::{VkCall, VkError, VkResult};
use super::validation::{self, ValidationLog};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// The Vulkan API version the instance asks for and devices must support (the
/// shaders are compiled for it, see `TARGET_VULKAN` in build.rs).
pub(crate) const API_VERSION: u32 = vk::API_VERSION_1_2;

/// The kind of a physical device, in the order [`DeviceSelector::Auto`] prefers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceKind {
    Discrete,
    Integrated,
    Virtual,
    /// A CPU implementation such as Mesa's lavapipe.
    Cpu,
    Other,
}

impl DeviceKind {
    fn from_vk(t: vk::PhysicalDeviceType) -> Self {
        match t {
            vk::PhysicalDeviceType::DISCRETE_GPU => Self::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => Self::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => Self::Virtual,
            vk::PhysicalDeviceType::CPU => Self::Cpu,
            _ => Self::Other,
        }
    }
}

/// What the loader reports about one physical device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Position in the loader's enumeration (what [`DeviceSelector::Index`] takes).
    pub index: usize,
    pub name: String,
    pub kind: DeviceKind,
    /// Supported Vulkan version, (major, minor, patch).
    pub api_version: (u32, u32, u32),
    pub vendor_id: u32,
    pub device_id: u32,
    /// The driver, as it names itself: VkPhysicalDeviceDriverProperties'
    /// name and info ("llvmpipe, Mesa 22.3.6 (LLVM 15.0.6)") on a Vulkan 1.2
    /// device, else the raw `driverVersion` in hex.
    pub driver: String,
    /// Bytes of the device-local memory heaps together (what
    /// [`DeviceLimits::device_local_bytes`](super::DeviceLimits) says too).
    pub device_local_bytes: u64,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor, patch) = self.api_version;
        write!(
            f,
            "{}: {} ({:?}, Vulkan {major}.{minor}.{patch})",
            self.index, self.name, self.kind
        )
    }
}

/// Which physical device a context uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DeviceSelector {
    /// Discrete GPU first, then integrated, virtual, CPU, other; ties by index.
    #[default]
    Auto,
    /// The device at this enumeration index.
    Index(usize),
    /// The first device whose name contains this (case-insensitive).
    Name(String),
}

impl FromStr for DeviceSelector {
    type Err = std::convert::Infallible;

    /// `""` or `"auto"` -> Auto, a number -> Index, anything else -> Name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        Ok(if s.is_empty() || s.eq_ignore_ascii_case("auto") {
            Self::Auto
        } else if let Ok(i) = s.parse() {
            Self::Index(i)
        } else {
            Self::Name(s.to_string())
        })
    }
}

impl DeviceSelector {
    /// Picks from `devices` (as enumerated). Errors name the devices there are.
    pub fn choose<'a>(&self, devices: &'a [DeviceInfo]) -> VkResult<&'a DeviceInfo> {
        if devices.is_empty() {
            return Err(VkError::NoDevice);
        }
        let found = match self {
            Self::Auto => devices.iter().min_by_key(|d| (d.kind, d.index)),
            Self::Index(i) => devices.iter().find(|d| d.index == *i),
            Self::Name(needle) => {
                let needle = needle.to_lowercase();
                devices
                    .iter()
                    .find(|d| d.name.to_lowercase().contains(&needle))
            }
        };
        found.ok_or_else(|| VkError::DeviceNotFound {
            selector: match self {
                Self::Auto => "auto".to_string(),
                Self::Index(i) => i.to_string(),
                Self::Name(n) => n.clone(),
            },
            available: devices
                .iter()
                .map(|d| format!("{d}"))
                .collect::<Vec<_>>()
                .join("; "),
        })
    }
}

/// The Vulkan loader, loaded once and never unloaded (unloading it would
/// unload the drivers and layers that every instance of the process uses).
pub(crate) fn entry() -> VkResult<&'static ash::Entry> {
    static ENTRY: OnceLock<Result<ash::Entry, String>> = OnceLock::new();
    ENTRY
        // SAFETY: loading libvulkan runs its initialisers; the Vulkan loader is
        // designed to be loaded this way, and the static keeps it loaded for as
        // long as the process runs, so every handle obtained through it stays
        // valid.
        .get_or_init(|| unsafe { ash::Entry::load() }.map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| VkError::Loader(e.clone()))
}

/// Instance + (with validation) the messenger. Created once per validation
/// setting and never destroyed ([`super::device`] says why).
pub(crate) struct Instance {
    pub(crate) raw: ash::Instance,
    debug: Option<(debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// What the layer reports on no context's call (see
    /// [`validation::attribute_to`]); the messenger's `p_user_data`.
    pub(crate) log: Arc<ValidationLog>,
}

impl Instance {
    /// Creates an instance through the process's loader; with `validation`,
    /// enables VK_LAYER_KHRONOS_validation with synchronization validation
    /// and a messenger that records warnings and errors (in the log of the
    /// context whose call caused them, else in [`Instance::log`]).
    pub(crate) fn new(validation: bool) -> VkResult<Self> {
        let entry = entry()?;
        let log = Arc::new(ValidationLog::default());

        let mut layers: Vec<*const c_char> = Vec::new();
        let mut extensions: Vec<*const c_char> = Vec::new();
        if validation {
            // SAFETY: plain query through a loaded entry; no handles involved.
            let available = unsafe { entry.enumerate_instance_layer_properties() }
                .call("vkEnumerateInstanceLayerProperties")?;
            if !available
                .iter()
                .any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER))
            {
                return Err(VkError::ValidationLayerMissing);
            }
            // SAFETY: plain query; the layer name is a valid NUL-terminated string.
            let layer_exts =
                unsafe { entry.enumerate_instance_extension_properties(Some(VALIDATION_LAYER)) }
                    .call("vkEnumerateInstanceExtensionProperties")?;
            // SAFETY: plain query of the loader's and implicit layers' extensions.
            let global_exts = unsafe { entry.enumerate_instance_extension_properties(None) }
                .call("vkEnumerateInstanceExtensionProperties")?;
            let has = |name: &CStr| {
                layer_exts
                    .iter()
                    .chain(&global_exts)
                    .any(|e| e.extension_name_as_c_str() == Ok(name))
            };
            for ext in [debug_utils::NAME, ash::ext::validation_features::NAME] {
                if !has(ext) {
                    return Err(VkError::MissingExtension(if ext == debug_utils::NAME {
                        "VK_EXT_debug_utils"
                    } else {
                        "VK_EXT_validation_features"
                    }));
                }
                extensions.push(ext.as_ptr());
            }
            layers.push(VALIDATION_LAYER.as_ptr());
        }

        let app = vk::ApplicationInfo::default()
            .application_name(c"sharpi")
            .engine_name(c"sharpi")
            .api_version(API_VERSION);
        let enabled_features = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enabled_features);
        let user_data = Arc::as_ptr(&log).cast_mut().cast::<std::ffi::c_void>();
        // Catches messages from vkCreateInstance / vkDestroyInstance themselves.
        let mut creation_messenger = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(validation::severities())
            .message_type(validation::message_types())
            .pfn_user_callback(Some(validation::callback))
            .user_data(user_data);
        let mut create_info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions);
        if validation {
            create_info = create_info
                .push_next(&mut features)
                .push_next(&mut creation_messenger);
        }
        // SAFETY: every pointer in create_info (app info, layer and extension names,
        // the pNext chain) points to locals that outlive this call; the chained
        // messenger's user data is the Arc'd log, which the Instance keeps alive
        // for as long as it lives (the process).
        let raw = match unsafe { entry.create_instance(&create_info, None) } {
            Ok(raw) => raw,
            Err(vk::Result::ERROR_INCOMPATIBLE_DRIVER) => return Err(VkError::NoDriver),
            Err(result) => {
                return Err(VkError::Vk {
                    call: "vkCreateInstance",
                    result,
                })
            }
        };

        let debug = if validation {
            let loader = debug_utils::Instance::new(entry, &raw);
            // Its own create info, with no pNext chain.
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(validation::severities())
                .message_type(validation::message_types())
                .pfn_user_callback(Some(validation::callback))
                .user_data(user_data);
            // SAFETY: `raw` is a live instance with VK_EXT_debug_utils enabled; the
            // user data (the Arc'd log) outlives the messenger, which Drop destroys
            // before the instance.
            match unsafe { loader.create_debug_utils_messenger(&info, None) } {
                Ok(messenger) => Some((loader, messenger)),
                Err(result) => {
                    // SAFETY: `raw` was just created, nothing else uses it yet.
                    unsafe { raw.destroy_instance(None) };
                    return Err(VkError::Vk {
                        call: "vkCreateDebugUtilsMessengerEXT",
                        result,
                    });
                }
            }
        } else {
            None
        };
        Ok(Self { raw, debug, log })
    }

    /// Whether the validation layer and the messenger are on.
    pub(crate) fn validation_enabled(&self) -> bool {
        self.debug.is_some()
    }

    /// All physical devices, in enumeration order, with the handle for each.
    pub(crate) fn devices(&self) -> VkResult<Vec<(vk::PhysicalDevice, DeviceInfo)>> {
        // SAFETY: `self.raw` is a live instance.
        let handles =
            unsafe { self.raw.enumerate_physical_devices() }.call("vkEnumeratePhysicalDevices")?;
        Ok(handles
            .into_iter()
            .enumerate()
            .map(|(index, pd)| {
                // SAFETY: `pd` was just enumerated from this live instance.
                let props = unsafe { self.raw.get_physical_device_properties(pd) };
                let name = props
                    .device_name_as_c_str()
                    .map(|c| c.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| "(unnamed)".to_string());
                let v = props.api_version;
                let driver = self.driver(pd, &props);
                // SAFETY: `pd` was just enumerated from this live instance.
                let memory = unsafe { self.raw.get_physical_device_memory_properties(pd) };
                let device_local_bytes = memory
                    .memory_heaps
                    .iter()
                    .take(memory.memory_heap_count as usize)
                    .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
                    .map(|h| h.size)
                    .sum();
                let info = DeviceInfo {
                    index,
                    name,
                    kind: DeviceKind::from_vk(props.device_type),
                    api_version: (
                        vk::api_version_major(v),
                        vk::api_version_minor(v),
                        vk::api_version_patch(v),
                    ),
                    vendor_id: props.vendor_id,
                    device_id: props.device_id,
                    driver,
                    device_local_bytes,
                };
                (pd, info)
            })
            .collect())
    }

    /// What the driver of `pd` says it is ([`DeviceInfo::driver`]).
    fn driver(&self, pd: vk::PhysicalDevice, props: &vk::PhysicalDeviceProperties) -> String {
        let raw = format!("driverVersion {:#x}", props.driver_version);
        if props.api_version < vk::API_VERSION_1_2 {
            return raw;
        }
        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver);
        // SAFETY: `pd` was enumerated from this live instance (created for
        // Vulkan 1.2, so vkGetPhysicalDeviceProperties2 is core) and the
        // device supports 1.2, where VkPhysicalDeviceDriverProperties is
        // core; the pNext chain points to a local that outlives the call.
        unsafe { self.raw.get_physical_device_properties2(pd, &mut props2) };
        let text = |c: Result<&CStr, std::ffi::FromBytesUntilNulError>| {
            c.map(|c| c.to_string_lossy().into_owned())
        };
        match (
            text(driver.driver_name_as_c_str()),
            text(driver.driver_info_as_c_str()),
        ) {
            (Ok(name), Ok(info)) if !name.is_empty() => format!("{name}, {info}"),
            _ => raw,
        }
    }
}

/// Whether VK_LAYER_KHRONOS_validation is installed (false without a loader).
pub fn validation_layer_present() -> bool {
    let Ok(entry) = entry() else {
        return false;
    };
    // SAFETY: plain query through the loaded entry; no handles involved.
    unsafe { entry.enumerate_instance_layer_properties() }.is_ok_and(|layers| {
        layers
            .iter()
            .any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER))
    })
}

/// Whether `physical` has the device extension `name`; where it has,
/// `features` (that extension's feature struct) filled in by
/// vkGetPhysicalDeviceFeatures2.
pub(crate) fn extension_features<T: vk::ExtendsPhysicalDeviceFeatures2>(
    instance: &Instance,
    physical: vk::PhysicalDevice,
    name: &std::ffi::CStr,
    features: &mut T,
) -> VkResult<bool> {
    // SAFETY: `physical` was enumerated from this live instance.
    let exts = unsafe { instance.raw.enumerate_device_extension_properties(physical) }
        .call("vkEnumerateDeviceExtensionProperties")?;
    if !exts.iter().any(|e| e.extension_name_as_c_str() == Ok(name)) {
        return Ok(false);
    }
    let mut all = vk::PhysicalDeviceFeatures2::default().push_next(features);
    // SAFETY: `physical` belongs to this live instance (Vulkan 1.2+, where
    // vkGetPhysicalDeviceFeatures2 is core); the extension of the chained
    // struct is supported (checked above); the chain outlives the call.
    unsafe {
        instance
            .raw
            .get_physical_device_features2(physical, &mut all)
    };
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(index: usize, name: &str, kind: DeviceKind) -> DeviceInfo {
        DeviceInfo {
            index,
            name: name.into(),
            kind,
            api_version: (1, 3, 0),
            vendor_id: 0,
            device_id: 0,
            driver: String::new(),
            device_local_bytes: 0,
        }
    }

    #[test]
    fn auto_prefers_discrete_then_integrated() {
        let devices = [
            dev(0, "llvmpipe", DeviceKind::Cpu),
            dev(1, "iGPU", DeviceKind::Integrated),
            dev(2, "NVIDIA H200", DeviceKind::Discrete),
        ];
        assert_eq!(DeviceSelector::Auto.choose(&devices).unwrap().index, 2);
        assert_eq!(DeviceSelector::Auto.choose(&devices[..2]).unwrap().index, 1);
        assert_eq!(DeviceSelector::Auto.choose(&devices[..1]).unwrap().index, 0);
        assert_eq!(
            "h200"
                .parse::<DeviceSelector>()
                .unwrap()
                .choose(&devices)
                .unwrap()
                .index,
            2
        );
        assert_eq!(
            "0".parse::<DeviceSelector>()
                .unwrap()
                .choose(&devices)
                .unwrap()
                .index,
            0
        );
        assert_eq!("".parse::<DeviceSelector>().unwrap(), DeviceSelector::Auto);
        let err = DeviceSelector::Index(7)
            .choose(&devices)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`7`") && err.contains("llvmpipe"), "{err}");
        assert!(matches!(
            DeviceSelector::Auto.choose(&[]),
            Err(VkError::NoDevice)
        ));
    }
}
