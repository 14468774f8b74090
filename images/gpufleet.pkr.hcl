# The gpufleet node AMI: the base OS image plus site.yml's roles, applied with the same BOM
# (as extravars) that configures live nodes. Build command: `gpufleet.configure.image.packer_invocation`
# (it also writes the extravars file this template reads).
packer {
  required_plugins {
    amazon = {
      version = ">= 1.3.0"
      source  = "github.com/hashicorp/amazon"
    }
    ansible = {
      version = ">= 1.1.1"
      source  = "github.com/hashicorp/ansible"
    }
  }
}

variable "os" {
  type        = string
  description = "Node OS: al2023, ubuntu-22.04 or ubuntu-24.04 (the stack's image.os)."
  validation {
    condition     = contains(["al2023", "ubuntu-22.04", "ubuntu-24.04"], var.os)
    error_message = "The os must be al2023, ubuntu-22.04 or ubuntu-24.04."
  }
}

variable "region" {
  type = string
}

variable "builder_instance_type" {
  type        = string
  default     = "m7i.2xlarge"
  description = "Builds need no GPU: drivers are built by DKMS, services are enabled, not started."
}

variable "bom_name" {
  type = string
}

variable "bom_digest" {
  type = string
}

variable "extravars_file" {
  type        = string
  description = "JSON extravars from the BOM (gpufleet.configure.image.write_image_extravars)."
}

locals {
  base = {
    "al2023" = {
      owners = ["amazon"]
      name   = "al2023-ami-2023.*-kernel-6.1-x86_64"
      user   = "ec2-user"
      device = "/dev/xvda"
    }
    "ubuntu-22.04" = {
      owners = ["099720109477"]
      name   = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"
      user   = "ubuntu"
      device = "/dev/sda1"
    }
    "ubuntu-24.04" = {
      owners = ["099720109477"]
      name   = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"
      user   = "ubuntu"
      device = "/dev/sda1"
    }
  }
  bom_tag = substr(replace(var.bom_digest, "sha256:", ""), 0, 12)
}

source "amazon-ebs" "node" {
  region        = var.region
  instance_type = var.builder_instance_type
  ami_name      = "gpufleet-${var.os}-${var.bom_name}-${local.bom_tag}-{{timestamp}}"
  ssh_username  = local.base[var.os].user

  source_ami_filter {
    filters = {
      name                = local.base[var.os].name
      virtualization-type = "hvm"
      root-device-type    = "ebs"
    }
    owners      = local.base[var.os].owners
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = local.base[var.os].device
    volume_size           = 100
    volume_type           = "gp3"
    delete_on_termination = true
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }

  tags = {
    "gpufleet:os"         = var.os
    "gpufleet:bom"        = var.bom_name
    "gpufleet:bom-digest" = var.bom_digest
  }
}

build {
  sources = ["source.amazon-ebs.node"]

  provisioner "ansible" {
    playbook_file   = "${path.root}/../playbooks/site.yml"
    groups          = ["gpu"]
    user            = local.base[var.os].user
    use_proxy       = false
    extra_arguments = ["--become", "--extra-vars", "@${var.extravars_file}"]
    ansible_env_vars = [
      "ANSIBLE_ROLES_PATH=${path.root}/../playbooks/roles",
      "ANSIBLE_HOST_KEY_CHECKING=False",
    ]
  }

  post-processor "manifest" {
    output = "packer-manifest.json"
    custom_data = {
      bom_digest = var.bom_digest
    }
  }
}
