"""Node configuration: ansible-runner driver, inventories, extravars from the BOM, image builds."""
